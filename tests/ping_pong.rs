//! `ping-pong` under mpiexec. nextest runs it alone (.config/nextest.toml): the
//! oversubscribed tests beside it would deschedule the ranks it times.

use crate::common;

/// ping-pong between two ranks: rank 1 makes as many round trips as rank 0 decided from its
/// probe (a mismatch would hang, caught by the time limit, or mix sizes), the largest
/// message takes longer than the smallest, the fit gives a positive per-byte time (the
/// report's, from its own points), and --iters fixes the count for every size.
#[test]
fn ping_pong_agrees_on_its_trips_and_fits_the_link() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("links.json");
    let sizes = "4B,64KiB,1MiB,4MiB";
    let limited = |args: &[&str]| {
        let mut cmd = common::mpiexec_ranks(2);
        cmd.args(args);
        common::run_limited(cmd, 120)
    };
    let o = limited(&["ping-pong", "--sizes", sizes, "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: dcgan_train::scaling::pingpong::LinkReport =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).expect("ping-pong --json writes a LinkReport");
    let bytes: Vec<usize> = report.points.iter().map(|p| p.bytes).collect();
    assert_eq!(bytes, [4, 64 << 10, 1 << 20, 4 << 20]);
    for p in &report.points {
        assert!((5..=2000).contains(&p.round_trips), "{p:?}");
        assert!(0.0 < p.one_way_us_min && p.one_way_us_min <= p.one_way_us_median, "{p:?}");
    }
    assert!(report.points[3].one_way_us_median > report.points[0].one_way_us_median, "{:?}", report.points);
    assert!(report.beta_ns_per_byte > 0.0, "{report:?}");
    // The report's constants are the fit of its own points, which says which times it used.
    let fit = dcgan_train::scaling::pingpong::fit_alpha_beta(&report.points);
    assert_eq!(report.fitted_on_fastest_trips, fit.on_fastest_trips, "{report:?}");
    assert!((report.beta_ns_per_byte - fit.beta * 1e9).abs() <= 1e-9 * report.beta_ns_per_byte, "{report:?}");

    let o = limited(&["ping-pong", "--sizes", sizes, "--iters", "20", "--json", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: dcgan_train::scaling::pingpong::LinkReport =
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report.points.iter().all(|p| p.round_trips == 20), "{:?}", report.points);
}
