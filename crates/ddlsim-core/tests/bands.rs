//! Network bands the lowering gives a training's transfers.

use ddlsim_core::lower::spec::{AlgorithmName, GroupSpec, LayerSpec, SyncSpec, BANDS};
use ddlsim_core::lower::training::build_graph;
use ddlsim_core::TrainingSpec;

#[test]
fn group_bands_replace_job_band_per_group_in_the_lowered_graph() {
    let layers = (0..2).map(|_| LayerSpec { fwd_ns: 1, bwd_ns: 2 }).collect();
    let groups = (0..2).map(|l| GroupSpec { layers: vec![l], tensor: l as i32, bytes: 1000, server: 0, update_ns: 0 }).collect();
    let mut s = TrainingSpec { job_band: 1, ..TrainingSpec::new(2, SyncSpec::Allreduce { algorithm: AlgorithmName::Ring }, layers, groups) };
    s.group_bands = vec![5, 0];
    s.validate().unwrap();
    let g = build_graph(&s).unwrap();
    let bands: Vec<(i32, u8)> = g.ops.iter().filter(|o| o.group >= 0).map(|o| (o.group, o.band)).collect();
    assert!(!bands.is_empty());
    assert!(bands.iter().all(|&(gi, b)| b == [5, 0][gi as usize]), "{bands:?}");
    s.group_bands = vec![5];
    assert!(s.validate().unwrap_err().contains("group_bands has 1 entries for 2 groups"));
    s.group_bands = vec![5, BANDS as u8];
    assert!(s.validate().unwrap_err().contains("group_bands holds band 8"));
}
