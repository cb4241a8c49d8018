//! `python3 scripts/reports scaling` on a bench-scaling.sh folder built by hand: each repeat's
//! runs are paired (1 host against N hosts, overlap against --no-exchange), and the targets are
//! judged on the medians of those ratios, not on the ratio of the medians; the step budget is
//! split within each repeat, so that its parts add up; eq. (1) is read from the runs' summaries.

use crate::common::scaling_bench::*;
use serde_json::{Value, json};

#[test]
fn targets_are_judged_on_ratios_paired_by_repeat() {
    let tmp = bench_folder();
    let out = tmp.path();
    // Repeat 2 ran in a slow stretch of the machine on both sides. Paired, the 2-host
    // efficiency is 200/210, 250/290, 400/420: median 0.952 (met).
    write_repeats(out, (1, "overlap"), (2, "overlap"), &[(1, 200.0, 210.0), (2, 250.0, 290.0), (3, 400.0, 420.0)]);
    // Runs whose repeat has no partner pair with nothing (pairing by position would match
    // these two), but count in the medians of the runs: median(200, 250, 400, 300) = 275
    // over median(210, 290, 420, 1000) = 355 gives 0.775 (not met).
    write_run(out, 2, "overlap", 4, 1000.0);
    write_run(out, 1, "overlap", 5, 300.0);
    // 4 hosts against --no-exchange, paired: 500/480, 600/520, 700/690, median 1.042 (+4.2%,
    // met); the medians give 600/520 = 1.154 (+15.4%, not met).
    write_repeats(out, (4, "overlap"), (4, "no-exchange"), &[(1, 500.0, 480.0), (2, 600.0, 520.0), (3, 700.0, 690.0)]);
    let (md, results) = report(out);

    assert_ratios(&results, "2", "efficiency", &[(1, 200.0 / 210.0), (2, 250.0 / 290.0), (3, 400.0 / 420.0)]);
    // What the placement alone allows: t_1 over the --no-exchange step of the same repeat.
    assert_ratios(&results, "4", "placement", &[(1, 200.0 / 480.0), (2, 250.0 / 520.0), (3, 400.0 / 690.0)]);
    assert_ratios(&results, "2", "placement", &[]);
    let two = target(&results, "2-host efficiency");
    assert!(close(two["value"].as_f64().unwrap(), 200.0 / 210.0) && two["met"] == true, "{two}");
    let four = target(&results, "4-host exchange");
    assert!(close(four["value"].as_f64().unwrap(), 500.0 / 480.0 - 1.0) && four["met"] == true, "{four}");
    // The medians of the runs are still reported beside the paired figure.
    assert!(md.contains("medians of the runs give 0.775"), "{md}");
    assert!(md.contains("medians of the runs give +15.4%"), "{md}");
    // Parts this run left out are left out of the report, not failed on.
    assert!(md.contains("## Paired by repeat") && !md.contains("## Allreduce"), "{md}");
}

/// Eq. (1) is each run's own (summary.json's `weak_scaling`), not t_1 / t_N again: against a
/// 1-host baseline at half the batch, the speedup doubles the ratio of the step times.
#[test]
fn the_speedup_is_read_from_each_runs_summary() {
    let tmp = bench_folder();
    let out = tmp.path();
    for r in 1..=3 {
        let mut one = summary(1, "overlap", 100.0);
        one["batch_size_per_rank"] = json!(32);
        write_summary(out, 1, "overlap", r, &one);
        write_run(out, 2, "overlap", r, 150.0);
    }
    let (md, results) = report(out);
    // 100 / 150 * 64 / 32 = 4/3 in every repeat; the step times alone give 2/3.
    let third = 4.0 / 3.0;
    assert_ratios(&results, "2", "efficiency", &[(1, third), (2, third), (3, third)]);
    let two = target(&results, "2-host efficiency");
    assert!(close(two["value"].as_f64().unwrap(), third) && two["met"] == true, "{two}");
    assert!(md.contains("medians of the runs give 1.333"), "{md}");
    let measured = results["measured"].as_array().unwrap().iter().find(|m| m["hosts"] == 2).unwrap();
    assert!(close(measured["speedup"].as_f64().unwrap(), 2.0 * third), "{measured}");
    assert!(md.contains("| 2 | overlap | 150.0 | 853.3 | 2.67 | 1.333 |"), "{md}");
}

#[test]
fn a_paired_median_below_the_target_is_not_met() {
    let tmp = bench_folder();
    let out = tmp.path();
    // Paired: 300/310, 200/260, 300/340, median 0.882 (not met), though the medians of the
    // runs give 300/310 = 0.968.
    write_repeats(out, (1, "overlap"), (2, "overlap"), &[(1, 300.0, 310.0), (2, 200.0, 260.0), (3, 300.0, 340.0)]);
    let (md, results) = report(out);
    let two = target(&results, "2-host efficiency");
    assert!(close(two["value"].as_f64().unwrap(), 300.0 / 340.0) && two["met"] == false, "{two}");
    assert!(md.contains("medians of the runs give 0.968"), "{md}");
    // A target this run has no runs for is listed as not measured, neither met nor missed.
    let four = target(&results, "4-host exchange");
    assert!(four["met"].is_null() && four["value"].is_null(), "{four}");
    assert!(md.contains("4-host exchange <= 10% over --no-exchange: not measured in this run"), "{md}");
}

#[test]
fn the_step_budget_adds_up_within_each_repeat() {
    let tmp = bench_folder();
    let out = tmp.path();
    // Per repeat: t_1, then N hosts --no-exchange (step, compute) and overlap (step, compute).
    // The 2-host summaries say how long the training thread waited for a core: 1 ms per step
    // without the exchange, 3 + repeat ms with it; the 4-host ones do not say.
    // At 2 hosts the medians over repeats of t_1 (250) and of the overlap step (260) are those
    // of repeat 3, while the median efficiency is repeat 2's: a part taken from the medians
    // would mix repeats, and the row in bold must follow the efficiency.
    type Repeat = (u32, f64, (f64, f64), (f64, f64));
    let two: [Repeat; 3] = [
        (1, 300.0, (310.0, 305.0), (400.0, 330.0)),
        (2, 200.0, (215.0, 210.0), (230.0, 220.0)),
        (3, 250.0, (255.0, 252.0), (260.0, 256.0)),
    ];
    // At 4 hosts an even number of repeats: efficiencies 0.5, 0.4, 0.4545, 0.7, whose lower
    // middle one is repeat 3's.
    let four: [Repeat; 4] = [
        (1, 300.0, (560.0, 550.0), (600.0, 590.0)),
        (2, 200.0, (480.0, 470.0), (500.0, 490.0)),
        (3, 250.0, (520.0, 510.0), (550.0, 540.0)),
        (4, 280.0, (380.0, 370.0), (400.0, 390.0)),
    ];
    for (hosts, repeats) in [(2, &two[..]), (4, &four[..])] {
        let said = |ms: f64| (hosts == 2).then_some(ms);
        for &(r, t1, (noex_ms, noex_compute), (over_ms, over_compute)) in repeats {
            write_run(out, 1, "overlap", r, t1);
            write_run_computing(out, hosts, "no-exchange", r, noex_ms, noex_compute, said(1.0));
            write_run_computing(out, hosts, "overlap", r, over_ms, over_compute, said(3.0 + f64::from(r)));
        }
    }
    let (md, results) = report(out);
    for (hosts, repeats) in [("2", &two[..]), ("4", &four[..])] {
        let rows = results["budget"][hosts].as_array().unwrap();
        assert_eq!(rows.len(), repeats.len(), "{rows:?}");
        for (row, &(r, t1, (_, noex_compute), (over_ms, over_compute))) in rows.iter().zip(repeats) {
            let f = |k: &str| row[k].as_f64().unwrap();
            assert_eq!(row["repeat"], r);
            assert!(close(f("t1"), t1) && close(f("step"), over_ms), "{row}");
            assert!(close(f("placement"), noex_compute - t1), "{row}");
            assert!(close(f("slowed"), over_compute - noex_compute), "{row}");
            assert!(close(f("waiting"), over_ms - over_compute), "{row}");
            assert!(close(f("t1") + f("placement") + f("slowed") + f("waiting"), f("step")), "{row}");
            if hosts == "2" {
                assert!(close(f("core_taken"), 2.0 + f64::from(r)), "{row}");
            } else {
                assert!(row["core_taken"].is_null(), "{row}");
            }
        }
        // Exactly one row in bold per host count.
        assert_eq!(md.matches(&format!("| {hosts} | **")).count(), 1, "{md}");
    }
    // 2 hosts, efficiencies 300/400, 200/230, 250/260: repeat 2 (0.870) is the median.
    assert!(md.contains("| 2 | **2** | 200.0 | +10.0 | +10.0 | (+4.0) | +10.0 | 230.0 | 0.870 |"), "{md}");
    assert!(md.contains("| 2 | 3 | 250.0 | +2.0 | +4.0 | (+5.0) | +4.0 | 260.0 | 0.962 |"), "{md}");
    assert!(md.contains("| 4 | **3** | 250.0 | +260.0 | +30.0 | - | +10.0 | 550.0 | 0.455 |"), "{md}");
}

/// The interval the report gives for a target's paired median: (low, high, level).
fn interval(t: &Value) -> (f64, f64, f64) {
    let iv = t["interval"].as_array().unwrap_or_else(|| panic!("no interval: {t}"));
    (iv[0].as_f64().unwrap(), iv[1].as_f64().unwrap(), iv[2].as_f64().unwrap())
}

#[test]
fn the_repeats_say_whether_they_can_tell_a_target_met_from_missed() {
    // Five repeats: the interval is the smallest and largest ratio, at 1 - 2/2^5 = 93.75%.
    let tmp = bench_folder();
    let out = tmp.path();
    let one = |ms: &[f64]| ms.iter().enumerate().map(|(i, &m)| (i as u32 + 1, 200.0, m)).collect::<Vec<_>>();
    // 2 hosts: every efficiency over 0.9 (0.909 to 0.976): met beyond the noise.
    write_repeats(out, (1, "overlap"), (2, "overlap"), &one(&[210.0, 215.0, 220.0, 205.0, 212.0]));
    // 4 hosts: a median of +8.3% (met), but the repeats run from +4.2% to +20%.
    let four = [(500.0, 480.0), (560.0, 490.0), (520.0, 480.0), (600.0, 500.0), (530.0, 490.0)];
    let rows: Vec<_> = four.iter().enumerate().map(|(i, &(a, b))| (i as u32 + 1, a, b)).collect();
    write_repeats(out, (4, "overlap"), (4, "no-exchange"), &rows);
    let (md, results) = report(out);
    let two = target(&results, "2-host efficiency");
    let (lo, hi, level) = interval(two);
    assert!(close(lo, 200.0 / 220.0) && close(hi, 200.0 / 205.0) && close(level, 0.9375), "{two}");
    assert!(two["met"] == true && two["decided"] == true, "{two}");
    let four = target(&results, "4-host exchange");
    let (lo, hi, _) = interval(four);
    assert!(close(lo, 500.0 / 480.0) && close(hi, 600.0 / 500.0), "{four}");
    assert!(close(four["value"].as_f64().unwrap(), 520.0 / 480.0 - 1.0) && four["met"] == true, "{four}");
    assert!(four["decided"].is_null(), "{four}");
    assert!(md.contains("met beyond this sitting's noise"), "{md}");
    assert!(md.contains("on both sides of +10.0%: these repeats cannot tell"), "{md}");

    // Eight repeats: the 2nd smallest to the 2nd largest (93%), so one repeat in a fast
    // stretch (1.053) does not hide that the others all miss 0.9 (0.833 to 0.870).
    let tmp = bench_folder();
    let out = tmp.path();
    write_repeats(out, (1, "overlap"), (2, "overlap"), &one(&[190.0, 230.0, 235.0, 240.0, 232.0, 238.0, 236.0, 260.0]));
    let (md, results) = report(out);
    let two = target(&results, "2-host efficiency");
    let (lo, hi, level) = interval(two);
    assert!(close(lo, 200.0 / 240.0) && close(hi, 200.0 / 230.0), "{two}");
    assert!((level - (1.0 - 2.0 * 9.0 / 256.0)).abs() < 1e-12, "{two}");
    assert!(two["met"] == false && two["decided"] == false, "{two}");
    assert!(md.contains("missed beyond this sitting's noise"), "{md}");

    // Four repeats are too few for a 90% interval: the report says so and decides nothing.
    let tmp = bench_folder();
    let out = tmp.path();
    write_repeats(out, (1, "overlap"), (2, "overlap"), &one(&[210.0, 215.0, 220.0, 205.0]));
    let (md, results) = report(out);
    let two = target(&results, "2-host efficiency");
    assert!(two["interval"].is_null() && two["decided"].is_null() && two["met"] == true, "{two}");
    assert!(md.contains("4 repeats are too few for a 90% interval"), "{md}");
}
