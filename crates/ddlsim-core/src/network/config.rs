//! Network configuration as the engine reads it (plain data from Python).

use serde::Deserialize;

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    Analytic,
    Flow,
    /// Packets through output-queued ports, carried by TCP (see [`super::packet`]).
    Packet,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Routing {
    #[default]
    Ecmp,
    Spray,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    Star,
    LeafSpine {
        hosts_per_leaf: u32,
        spines: u32,
        oversubscription: f64,
        #[serde(default)]
        routing: Routing,
    },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    pub fidelity: Fidelity,
    pub bandwidth_bps: f64,
    pub latency_ns: u64,
    pub topology: TopologySpec,
    #[serde(default)]
    pub intra_host_bandwidth_bps: Option<f64>,
    #[serde(default)]
    pub intra_host_latency_ns: u64,
    #[serde(default)]
    pub record_flows: bool,
    /// Packet-level parameters; only read at [`Fidelity::Packet`].
    #[serde(default)]
    pub packet: Option<PacketSpec>,
    /// Hosts in the fabric, at least those the ranks use (the others run no
    /// rank and only carry background tenants' flows).
    #[serde(default)]
    pub hosts: Option<u32>,
    /// Background tenants (see [`super::tenants`]).
    #[serde(default)]
    pub tenants: Vec<TenantSpec>,
}

impl NetworkSpec {
    /// A star of the given link rate and latency with every other field at
    /// its default (no intra-host links, no flow records, no packet options,
    /// as many hosts as ranks, no tenants).
    pub fn star(fidelity: Fidelity, bandwidth_bps: f64, latency_ns: u64) -> NetworkSpec {
        NetworkSpec {
            fidelity,
            bandwidth_bps,
            latency_ns,
            topology: TopologySpec::Star,
            intra_host_bandwidth_bps: None,
            intra_host_latency_ns: 0,
            record_flows: false,
            packet: None,
            hosts: None,
            tenants: Vec::new(),
        }
    }
}

/// A background tenant: open-loop Poisson flows between hosts with sizes
/// from an empirical CDF.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// Written in the flows' tenant column (the job is tenant 0).
    pub id: u32,
    #[serde(default)]
    pub band: u8,
    #[serde(default)]
    pub seed: u64,
    /// (bytes, cumulative fraction) points: bytes strictly increasing,
    /// fractions non-decreasing in (0, 1], the last 1.
    pub cdf: Vec<(f64, f64)>,
    /// Flow arrivals per second per sending host.
    pub rate_per_host: f64,
    /// (source host, destination host) pairs; None: each sending host picks
    /// a uniformly random other host among `hosts`.
    #[serde(default)]
    pub pairs: Option<Vec<(u32, u32)>>,
    /// With no pairs, the hosts that send and receive (None: all).
    #[serde(default)]
    pub hosts: Option<Vec<u32>>,
    #[serde(default)]
    pub start_ns: u64,
    /// Arrivals stop here; None: when the job's last operation ends.
    #[serde(default)]
    pub stop_ns: Option<u64>,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Framing {
    /// Ethernet II: 14-byte header, 4-byte FCS, 8-byte preamble and a
    /// 12-byte inter-frame gap; frames padded to 64 bytes.
    #[default]
    Ethernet,
    /// PPP's 2-byte header (ns-3's point-to-point links).
    Ppp,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    #[default]
    Newreno,
    Dctcp,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LimitUnit {
    #[default]
    Packets,
    Bytes,
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum QueueScope {
    /// Each band holds up to the limit (Linux pfifo_fast: txqueuelen per band).
    #[default]
    Band,
    /// The bands of a port share the limit (ns-3's PfifoFastQueueDisc).
    Port,
}

/// The packet model's parameters (defaults: Linux-like TCP on Ethernet).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PacketSpec {
    pub mtu: u32,
    pub framing: Framing,
    pub tcp_timestamps: bool,
    pub transport: Transport,
    pub bands: u8,
    pub queue_limit: u64,
    pub queue_limit_unit: LimitUnit,
    pub queue_scope: QueueScope,
    /// ECN marking threshold K in packets (None: no marking).
    pub ecn_threshold: Option<u32>,
    pub initial_window: u32,
    pub rto_min_ns: u64,
    pub rto_initial_ns: u64,
    pub delayed_ack: bool,
    pub delayed_ack_timeout_ns: u64,
    pub receive_window: u64,
    pub restart_after_idle: bool,
    pub connection_per_message: bool,
    pub dctcp_g: f64,
    pub queue_sample_ns: Option<u64>,
    pub queue_sample_cap: u64,
}

impl Default for PacketSpec {
    fn default() -> Self {
        PacketSpec {
            mtu: 1500,
            framing: Framing::Ethernet,
            tcp_timestamps: false,
            transport: Transport::Newreno,
            bands: 3,
            queue_limit: 1000,
            queue_limit_unit: LimitUnit::Packets,
            queue_scope: QueueScope::Band,
            ecn_threshold: None,
            initial_window: 10,
            rto_min_ns: 200_000_000,
            rto_initial_ns: 1_000_000_000,
            delayed_ack: false,
            delayed_ack_timeout_ns: 40_000_000,
            receive_window: 6_291_456,
            restart_after_idle: true,
            connection_per_message: false,
            dctcp_g: 1.0 / 16.0,
            queue_sample_ns: None,
            queue_sample_cap: 1_000_000,
        }
    }
}
