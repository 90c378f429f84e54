// Reference scenarios for ddlsim's packet model, as a compiled ns-3 (3.44) program.
//
// A star: every host has one point-to-point link to a switch (an ns-3 router
// with global routing); every device has a queue disc (pfifo_fast, a FIFO or
// RED for DCTCP marking) and a one-packet device queue under it. Flows are
// messages over TCP connections opened before the data starts (one connection
// per (src, dst, band), reused by later messages, as ddlsim's default); a flow
// may wait for the delivery of another (a ring all-reduce's step dependency),
// driven by C++ callbacks. Every ns-3 attribute that differs from ddlsim's
// packet-model defaults is set explicitly below.
//
// Usage: ns3_scenarios --scenario=one_flow|incast|two_bands|ring [--name=value ...]
// (--PrintHelp lists the parameters). Prints one JSON object per flow
// ({"flow", "src", "dst", "bytes", "band", "start_ns", "end_ns"}; times from
// the start of the data, end = the last byte read by the receiving
// application), then one {"summary": {...}} line.
//
// Written for ddlsim (tools/packet_validation/ns3.py builds and runs it).

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace ns3;

namespace
{

struct FlowSpec
{
    uint32_t src;
    uint32_t dst;
    uint64_t bytes;
    uint32_t band;
    int64_t startNs; // release time (absolute, from the data start) when after < 0
    int64_t after;   // index of the flow whose delivery releases this one, or -1
    int64_t gapNs;   // delay after that delivery
};

struct Connection
{
    Ptr<Socket> tx;
    uint64_t pending = 0;                // bytes released but not yet written into the socket
    uint64_t received = 0;               // bytes the receiving application has read
    std::vector<uint64_t> boundary;      // cumulative end offset of each released message
    std::vector<size_t> flowOf;          // flow index of each released message
    size_t delivered = 0;                // messages fully received
    bool connected = false;
};

std::vector<FlowSpec> g_flows;
std::vector<Connection> g_conns;
std::vector<size_t> g_connOf;                 // connection of each flow
std::vector<std::vector<size_t>> g_waiting;   // flows released by each flow's delivery
std::vector<int64_t> g_start, g_end;          // per flow, ns since the data start
size_t g_done = 0;
int64_t g_dataStartNs = 0;
uint64_t g_packetsForwarded = 0, g_drops = 0, g_marks = 0;
uint32_t g_chunk = 65536;

int64_t
DataNow()
{
    return Simulator::Now().GetNanoSeconds() - g_dataStartNs;
}

void
Pump(size_t c)
{
    Connection& conn = g_conns[c];
    while (conn.pending > 0)
    {
        uint32_t room = conn.tx->GetTxAvailable();
        if (room == 0)
        {
            return; // the send callback calls again when the buffer drains
        }
        uint32_t n = static_cast<uint32_t>(std::min<uint64_t>({conn.pending, room, g_chunk}));
        int sent = conn.tx->Send(Create<Packet>(n));
        if (sent <= 0)
        {
            return;
        }
        conn.pending -= static_cast<uint64_t>(sent);
    }
}

void
SendRoom(size_t c, Ptr<Socket>, uint32_t)
{
    Pump(c);
}

void
Release(size_t f)
{
    size_t c = g_connOf[f];
    Connection& conn = g_conns[c];
    g_start[f] = DataNow();
    uint64_t last = conn.boundary.empty() ? 0 : conn.boundary.back();
    conn.boundary.push_back(last + g_flows[f].bytes);
    conn.flowOf.push_back(f);
    conn.pending += g_flows[f].bytes;
    Pump(c);
}

void
Delivered(size_t f)
{
    g_end[f] = DataNow();
    for (size_t next : g_waiting[f])
    {
        Simulator::Schedule(NanoSeconds(g_flows[next].gapNs), &Release, next);
    }
    if (++g_done == g_flows.size())
    {
        Simulator::Stop();
    }
}

void
Receive(size_t c, Ptr<Socket> socket)
{
    Connection& conn = g_conns[c];
    Ptr<Packet> p;
    while ((p = socket->Recv()))
    {
        conn.received += p->GetSize();
    }
    while (conn.delivered < conn.boundary.size() && conn.received >= conn.boundary[conn.delivered])
    {
        Delivered(conn.flowOf[conn.delivered++]);
    }
}

void
Accept(size_t c, Ptr<Socket> socket, const Address&)
{
    socket->SetRecvCallback(MakeBoundCallback(&Receive, c));
}

void
Connected(size_t c, Ptr<Socket>)
{
    g_conns[c].connected = true;
}

void
ConnectFailed(size_t c, Ptr<Socket>)
{
    std::fprintf(stderr, "ns3_scenarios: connection %zu failed to open\n", c);
    std::exit(3);
}

void
CheckConnected()
{
    for (size_t c = 0; c < g_conns.size(); ++c)
    {
        if (!g_conns[c].connected)
        {
            std::fprintf(stderr,
                         "ns3_scenarios: connection %zu not open at the data start; raise --warmup-ns\n",
                         c);
            std::exit(3);
        }
    }
}

void
TraceCongState(size_t c, TcpSocketState::TcpCongState_t from, TcpSocketState::TcpCongState_t to)
{
    std::fprintf(stderr, "conn %zu t=%lld ns: %s -> %s\n", c, static_cast<long long>(DataNow()),
                 TcpSocketState::TcpCongStateName[from], TcpSocketState::TcpCongStateName[to]);
}

void
TraceCwnd(size_t c, uint32_t from, uint32_t to)
{
    std::fprintf(stderr, "conn %zu t=%lld ns: cwnd %u -> %u\n", c, static_cast<long long>(DataNow()), from, to);
}

void
TraceConnection(size_t c)
{
    g_conns[c].tx->TraceConnectWithoutContext("CongState", MakeBoundCallback(&TraceCongState, c));
    g_conns[c].tx->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&TraceCwnd, c));
}

void
CountTx(Ptr<const Packet>)
{
    ++g_packetsForwarded;
}

void
CountDrop(Ptr<const QueueDiscItem>)
{
    ++g_drops;
}

void
CountMark(Ptr<const QueueDiscItem>, const char*)
{
    ++g_marks;
}

// IP TOS whose Linux/ns-3 priority pfifo_fast maps to `band` (0 highest, 2 lowest).
uint8_t
TosOfBand(uint32_t band)
{
    switch (band)
    {
    case 0:
        return 0x10; // IPTOS_LOWDELAY -> priority 6 (interactive) -> band 0
    case 1:
        return 0x00; // best effort -> priority 0 -> band 1
    default:
        return 0x08; // IPTOS_THROUGHPUT -> priority 2 (bulk) -> band 2
    }
}

std::vector<FlowSpec>
ReadFlows(const std::string& path)
{
    // One flow a line: src dst bytes band start_ns after gap_ns ('#' starts a comment).
    std::ifstream in(path);
    if (!in)
    {
        std::fprintf(stderr, "ns3_scenarios: cannot read flows file %s\n", path.c_str());
        std::exit(2);
    }
    std::vector<FlowSpec> flows;
    std::string line;
    while (std::getline(in, line))
    {
        if (line.empty() || line[0] == '#')
        {
            continue;
        }
        std::istringstream row(line);
        FlowSpec f{};
        if (!(row >> f.src >> f.dst >> f.bytes >> f.band >> f.startNs >> f.after >> f.gapNs))
        {
            std::fprintf(stderr, "ns3_scenarios: %s: bad line '%s'\n", path.c_str(), line.c_str());
            std::exit(2);
        }
        flows.push_back(f);
    }
    return flows;
}

} // namespace

int
main(int argc, char* argv[])
{
    // Picosecond clock: a 1502-byte frame at 10 Gbit/s takes 1201.6 ns, which a nanosecond clock would round.
    Time::SetResolution(Time::PS);
    std::string scenario = "one_flow";
    std::string transport = "newreno";
    std::string flowsFile;
    std::string rate = "10Gbps";
    std::string linkDelay = "5us";
    uint32_t hosts = 0;
    uint64_t bytes = 0;
    uint32_t senders = 8;
    uint32_t queueLimit = 1000;
    uint32_t hostQueueLimit = 0;
    uint32_t ecnK = 0;
    uint32_t mtu = 1500;
    uint32_t iterations = 1;
    uint64_t gapNs = 0;
    uint32_t initialCwnd = 10;
    uint32_t delAckCount = 1;
    uint64_t rtoMinNs = 200000000;
    uint32_t buffer = 6291456;
    uint32_t rwnd = 0;
    bool limitedTransmit = true;
    double dctcpG = 0.0625;
    double dctcpAlphaInit = 1.0;
    uint64_t warmupNs = 1000000;
    double stopS = 1000.0;
    int64_t traceConn = -1;

    CommandLine cmd(__FILE__);
    cmd.AddValue("scenario", "one_flow | incast | two_bands | ring | file", scenario);
    cmd.AddValue("flows", "flows file for --scenario=file: 'src dst bytes band start_ns after gap_ns' a line", flowsFile);
    cmd.AddValue("transport", "newreno | dctcp", transport);
    cmd.AddValue("rate", "rate of every link", rate);
    cmd.AddValue("delay", "propagation delay of every link (host to host: twice)", linkDelay);
    cmd.AddValue("hosts", "hosts (ring; file: at least the ranks used)", hosts);
    cmd.AddValue("bytes", "bytes per flow (one_flow, incast, two_bands) or of the model (ring)", bytes);
    cmd.AddValue("senders", "incast senders", senders);
    cmd.AddValue("queue-limit", "queue disc limit of every port, packets", queueLimit);
    cmd.AddValue("host-queue-limit", "queue disc limit of the hosts' NICs, if not --queue-limit", hostQueueLimit);
    cmd.AddValue("ecn-k", "DCTCP marking threshold K in packets (0: no marking)", ecnK);
    cmd.AddValue("mtu", "IP MTU, bytes", mtu);
    cmd.AddValue("iterations", "ring: all-reduces one after the other", iterations);
    cmd.AddValue("gap-ns", "ring: idle time (compute) before each all-reduce after the first", gapNs);
    cmd.AddValue("initial-cwnd", "initial window, segments", initialCwnd);
    cmd.AddValue("delack-count", "segments per ACK (1: no delayed ACKs)", delAckCount);
    cmd.AddValue("rto-min-ns", "minimum retransmission timeout", rtoMinNs);
    cmd.AddValue("buffer", "socket send and receive buffers, bytes", buffer);
    cmd.AddValue("rwnd", "receive buffer (the window the receiver offers), bytes, if not --buffer", rwnd);
    cmd.AddValue("limited-transmit", "RFC 3042 limited transmit", limitedTransmit);
    cmd.AddValue("dctcp-g", "DCTCP g", dctcpG);
    cmd.AddValue("dctcp-alpha-init", "DCTCP initial alpha", dctcpAlphaInit);
    cmd.AddValue("warmup-ns", "time before the data starts (connections open meanwhile)", warmupNs);
    cmd.AddValue("stop-s", "simulated-time limit", stopS);
    cmd.AddValue("chunk", "bytes the application hands to the socket per Send call", g_chunk);
    cmd.AddValue("trace-connection", "print this connection's congestion states and windows to stderr", traceConn);
    cmd.Parse(argc, argv);

    // The flows.
    if (scenario == "one_flow")
    {
        hosts = 2;
        g_flows.push_back({0, 1, bytes ? bytes : 10000000, 1, 0, -1, 0});
    }
    else if (scenario == "incast")
    {
        hosts = senders + 1;
        for (uint32_t s = 1; s <= senders; ++s)
        {
            g_flows.push_back({s, 0, bytes ? bytes : 2000000, 1, 0, -1, 0});
        }
    }
    else if (scenario == "two_bands")
    {
        hosts = 3;
        uint64_t b = bytes ? bytes : 20000000;
        g_flows.push_back({1, 0, b, 0, 0, -1, 0});
        g_flows.push_back({2, 0, b, 2, 0, -1, 0});
    }
    else if (scenario == "ring")
    {
        hosts = hosts ? hosts : 8;
        uint64_t model = bytes ? bytes : 100000000;
        uint64_t chunk = model / hosts;
        uint32_t steps = 2 * (hosts - 1);
        auto index = [&](uint32_t it, uint32_t step, uint32_t h) {
            return static_cast<int64_t>((static_cast<uint64_t>(it) * steps + step) * hosts + h);
        };
        for (uint32_t it = 0; it < iterations; ++it)
        {
            for (uint32_t step = 0; step < steps; ++step)
            {
                for (uint32_t h = 0; h < hosts; ++h)
                {
                    uint32_t pred = (h + hosts - 1) % hosts;
                    FlowSpec f{h, (h + 1) % hosts, chunk, 1, 0, -1, 0};
                    if (step > 0)
                    {
                        f.after = index(it, step - 1, pred);
                    }
                    else if (it > 0)
                    {
                        f.after = index(it - 1, steps - 1, pred);
                        f.gapNs = static_cast<int64_t>(gapNs);
                    }
                    g_flows.push_back(f);
                }
            }
        }
    }
    else if (scenario == "file")
    {
        g_flows = ReadFlows(flowsFile);
        for (const auto& f : g_flows)
        {
            hosts = std::max({hosts, f.src + 1, f.dst + 1});
        }
    }
    else
    {
        std::fprintf(stderr, "ns3_scenarios: unknown --scenario=%s\n", scenario.c_str());
        return 2;
    }
    if (g_flows.empty() || hosts < 2)
    {
        std::fprintf(stderr, "ns3_scenarios: no flows\n");
        return 2;
    }

    // TCP: every attribute where ns-3's default differs from ddlsim's packet model.
    if (transport == "newreno")
    {
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpNewReno::GetTypeId()));
        Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("Off"));
    }
    else if (transport == "dctcp")
    {
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
        Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
        Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(dctcpG));
        Config::SetDefault("ns3::TcpDctcp::DctcpAlphaOnInit", DoubleValue(dctcpAlphaInit));
    }
    else
    {
        std::fprintf(stderr, "ns3_scenarios: unknown --transport=%s (newreno | dctcp)\n", transport.c_str());
        return 2;
    }
    // Classic NewReno fast recovery (RFC 6582), not ns-3's default proportional rate reduction.
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType", TypeIdValue(TcpClassicRecovery::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mtu - 40)); // ns-3: 536
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initialCwnd));
    Config::SetDefault("ns3::TcpSocket::InitialSlowStartThreshold", UintegerValue(UINT32_MAX));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(delAckCount)); // ns-3: 2
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(buffer));      // ns-3: 128 KiB
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(rwnd ? rwnd : buffer)); // ns-3: 128 KiB
    Config::SetDefault("ns3::TcpSocket::TcpNoDelay", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(NanoSeconds(rtoMinNs))); // ns-3: 1 s
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));          // ns-3: on
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(false));               // ns-3: on
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::LimitedTransmit", BooleanValue(limitedTransmit));
    Config::SetDefault("ns3::RttEstimator::InitialEstimation", TimeValue(Seconds(1)));

    // The star.
    NodeContainer hostNodes;
    hostNodes.Create(hosts);
    Ptr<Node> sw = CreateObject<Node>();
    InternetStackHelper stack;
    stack.Install(hostNodes);
    stack.Install(sw);

    PointToPointHelper p2p;
    p2p.SetDeviceAttribute("DataRate", StringValue(rate));
    p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    p2p.SetChannelAttribute("Delay", StringValue(linkDelay));
    // One packet under the queue disc (ns-3's default device queue of 100 would sit in front of the bands).
    p2p.SetQueue("ns3::DropTailQueue", "MaxSize", StringValue("1p"));

    // One queue disc configuration for the switch's ports and one for the hosts' NICs (their limits may differ).
    auto queueDisc = [&](uint32_t packets) {
        TrafficControlHelper tch;
        std::string limit = std::to_string(packets) + "p";
        if (ecnK > 0)
        {
            // DCTCP marking: instantaneous queue (QW = 1), MinTh = MaxTh = K, not gentle, mark instead of drop.
            tch.SetRootQueueDisc("ns3::RedQueueDisc",
                                 "MaxSize", StringValue(limit),
                                 "MinTh", DoubleValue(ecnK),
                                 "MaxTh", DoubleValue(ecnK),
                                 "QW", DoubleValue(1.0),
                                 "Gentle", BooleanValue(false),
                                 "UseEcn", BooleanValue(true),
                                 "UseHardDrop", BooleanValue(false),
                                 "MeanPktSize", UintegerValue(mtu),
                                 "LinkBandwidth", StringValue(rate),
                                 "LinkDelay", StringValue(linkDelay));
        }
        else
        {
            // Three strict-priority bands, one limit for the whole port (ns-3's pfifo_fast).
            tch.SetRootQueueDisc("ns3::PfifoFastQueueDisc", "MaxSize", StringValue(limit));
        }
        return tch;
    };
    TrafficControlHelper switchPorts = queueDisc(queueLimit);
    TrafficControlHelper hostPorts = queueDisc(hostQueueLimit ? hostQueueLimit : queueLimit);

    Ipv4AddressHelper address;
    std::vector<Ipv4Address> hostAddress(hosts);
    QueueDiscContainer qdiscs;
    for (uint32_t h = 0; h < hosts; ++h)
    {
        NetDeviceContainer link = p2p.Install(hostNodes.Get(h), sw);
        // Before Assign, which would install ns-3's default FqCoDel.
        qdiscs.Add(hostPorts.Install(link.Get(0)));
        qdiscs.Add(switchPorts.Install(link.Get(1)));
        std::ostringstream subnet;
        subnet << "10." << (h / 250) << "." << (h % 250) << ".0";
        address.SetBase(subnet.str().c_str(), "255.255.255.0");
        Ipv4InterfaceContainer ifaces = address.Assign(link);
        hostAddress[h] = ifaces.GetAddress(0);
    }
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    for (uint32_t i = 0; i < qdiscs.GetN(); ++i)
    {
        qdiscs.Get(i)->TraceConnectWithoutContext("Drop", MakeCallback(&CountDrop));
        qdiscs.Get(i)->TraceConnectWithoutContext("Mark", MakeCallback(&CountMark));
    }
    Config::ConnectWithoutContext("/NodeList/*/DeviceList/*/$ns3::PointToPointNetDevice/PhyTxEnd",
                                  MakeCallback(&CountTx));

    // Connections: one per (src, dst, band), opened during the warm-up.
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, size_t> connIndex;
    g_connOf.resize(g_flows.size());
    g_waiting.resize(g_flows.size());
    g_start.assign(g_flows.size(), -1);
    g_end.assign(g_flows.size(), -1);
    for (size_t f = 0; f < g_flows.size(); ++f)
    {
        const FlowSpec& spec = g_flows[f];
        if (spec.src >= hosts || spec.dst >= hosts || spec.src == spec.dst || spec.bytes == 0 || spec.band > 2 ||
            spec.after >= static_cast<int64_t>(f))
        {
            std::fprintf(stderr, "ns3_scenarios: flow %zu is invalid\n", f);
            return 2;
        }
        auto key = std::make_tuple(spec.src, spec.dst, spec.band);
        auto found = connIndex.find(key);
        if (found == connIndex.end())
        {
            size_t c = g_conns.size();
            connIndex[key] = c;
            g_conns.emplace_back();
            uint16_t port = static_cast<uint16_t>(10000 + c);
            Ptr<Socket> listener = Socket::CreateSocket(hostNodes.Get(spec.dst), TcpSocketFactory::GetTypeId());
            listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            listener->Listen();
            listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                        MakeBoundCallback(&Accept, c));
            Ptr<Socket> tx = Socket::CreateSocket(hostNodes.Get(spec.src), TcpSocketFactory::GetTypeId());
            tx->SetIpTos(TosOfBand(spec.band));
            tx->Bind();
            tx->SetConnectCallback(MakeBoundCallback(&Connected, c), MakeBoundCallback(&ConnectFailed, c));
            tx->SetSendCallback(MakeBoundCallback(&SendRoom, c));
            // Connect once the nodes are initialised (a SYN sent before would find no queue disc ready).
            Ipv4Address to = hostAddress[spec.dst];
            Simulator::Schedule(NanoSeconds(1), [tx, to, port] { tx->Connect(InetSocketAddress(to, port)); });
            g_conns[c].tx = tx;
            found = connIndex.find(key);
        }
        g_connOf[f] = found->second;
        if (spec.after >= 0)
        {
            g_waiting[spec.after].push_back(f);
        }
    }
    g_dataStartNs = static_cast<int64_t>(warmupNs);
    if (traceConn >= 0 && static_cast<size_t>(traceConn) < g_conns.size())
    {
        Simulator::Schedule(NanoSeconds(2), &TraceConnection, static_cast<size_t>(traceConn));
    }
    Simulator::Schedule(NanoSeconds(warmupNs), &CheckConnected);
    for (size_t f = 0; f < g_flows.size(); ++f)
    {
        if (g_flows[f].after < 0)
        {
            Simulator::Schedule(NanoSeconds(warmupNs + g_flows[f].startNs), &Release, f);
        }
    }

    // Count only the data phase's packets.
    Simulator::Schedule(NanoSeconds(warmupNs), [] { g_packetsForwarded = 0; });
    Simulator::Stop(Seconds(stopS));
    auto wall0 = std::chrono::steady_clock::now();
    std::clock_t cpu0 = std::clock();
    Simulator::Run();
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    double cpu = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC; // less sensitive to a shared machine
    int64_t simEnd = DataNow();
    // Drops by reason, over every queue disc (RED names forced and unforced drops and marks apart).
    std::map<std::string, uint64_t> dropReasons;
    for (uint32_t i = 0; i < qdiscs.GetN(); ++i)
    {
        const QueueDisc::Stats& st = qdiscs.Get(i)->GetStats();
        for (const auto& [reason, n] : st.nDroppedPacketsBeforeEnqueue)
        {
            dropReasons[reason] += n;
        }
        for (const auto& [reason, n] : st.nDroppedPacketsAfterDequeue)
        {
            dropReasons[reason] += n;
        }
    }
    std::string reasons = "{";
    for (const auto& [reason, n] : dropReasons)
    {
        reasons += (reasons.size() > 1 ? ", \"" : "\"") + reason + "\": " + std::to_string(n);
    }
    reasons += "}";
    Simulator::Destroy();

    for (size_t f = 0; f < g_flows.size(); ++f)
    {
        const FlowSpec& s = g_flows[f];
        std::printf("{\"flow\": %zu, \"src\": %u, \"dst\": %u, \"bytes\": %llu, \"band\": %u, \"start_ns\": %lld, "
                    "\"end_ns\": %lld}\n",
                    f, s.src, s.dst, static_cast<unsigned long long>(s.bytes), s.band,
                    static_cast<long long>(g_start[f]), static_cast<long long>(g_end[f]));
    }
    std::printf("{\"summary\": {\"scenario\": \"%s\", \"transport\": \"%s\", \"flows\": %zu, \"completed\": %zu, "
                "\"sim_end_ns\": %lld, \"wall_s\": %.6f, \"cpu_s\": %.6f, \"packets_forwarded\": %llu, \"drops\": %llu, "
                "\"ecn_marks\": %llu, \"drop_reasons\": %s}}\n",
                scenario.c_str(), transport.c_str(), g_flows.size(), g_done, static_cast<long long>(simEnd), wall, cpu,
                static_cast<unsigned long long>(g_packetsForwarded), static_cast<unsigned long long>(g_drops),
                static_cast<unsigned long long>(g_marks), reasons.c_str());
    return g_done == g_flows.size() ? 0 : 1;
}
