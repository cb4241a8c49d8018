//! The comm thread (`CommHandle`) on the Local transport: buckets averaged in order with
//! fragment hooks, the blocking helpers, and the stall detector's report.

use dcgan_train::comm::allreduce::select::Policy;
use dcgan_train::comm::{Algorithm, BucketRequest, CommConfig, CommHandle, start_local_group};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn config(fragment_bytes: usize, stall: Duration) -> CommConfig {
    CommConfig {
        policy: Policy::Threshold(1024),
        fragment_bytes,
        stall_timeout: stall,
        abort_on_failure: false,
        wire: Default::default(),
    }
}

/// Run `f(rank, handle)` on one thread per rank; returns the results in rank order.
fn on_ranks<R: Send>(handles: Vec<CommHandle>, f: impl Fn(usize, CommHandle) -> R + Sync) -> Vec<R> {
    let f = &f;
    std::thread::scope(|s| {
        let hs: Vec<_> = handles.into_iter().enumerate().map(|(r, h)| s.spawn(move || f(r, h))).collect();
        hs.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

fn grad(r: usize, i: usize, salt: usize) -> f32 {
    ((i * 13 + r * 7 + salt * 3) % 23) as f32 - 11.0
}

#[test]
fn buckets_are_averaged_exactly_with_hooks_per_fragment() {
    let p = 3;
    // 100 bytes per fragment: 25 floats, so a 1000-float bucket has 40 fragments.
    let handles = start_local_group(p, config(100, Duration::from_secs(30))).unwrap();
    let lens = [1000usize, 7, 0, 300];
    let results = on_ranks(handles, |r, comm| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<_> = lens
            .iter()
            .enumerate()
            .map(|(b, &n)| {
                let data: Vec<f32> = (0..n).map(|i| grad(r, i, b)).collect();
                let mut req = BucketRequest::new(b as u32, format!("layer{b}"), data);
                let before = seen.clone();
                let after = seen.clone();
                req.before_fragment = Some(Box::new(move |f| before.lock().unwrap().push((b, 'b', f))));
                req.after_fragment = Some(Box::new(move |f| after.lock().unwrap().push((b, 'a', f))));
                comm.submit(req)
            })
            .collect();
        let done: Vec<_> = tickets.into_iter().map(|t| comm.wait(t).unwrap()).collect();
        let algo_1000 = comm.algorithm_for(4000);
        comm.shutdown().unwrap();
        let hooks = seen.lock().unwrap().clone();
        (done, hooks, algo_1000)
    });
    for (r, (done, hooks, algo)) in results.into_iter().enumerate() {
        assert_eq!(done.len(), lens.len());
        for (b, mut d) in done.into_iter().enumerate() {
            assert_eq!(d.bytes, lens[b] * 4);
            let v = d.data.as_mut_slice();
            for (i, x) in v.iter().enumerate() {
                let sum: f32 = (0..p).map(|q| grad(q, i, b)).sum();
                assert_eq!(x.to_bits(), (sum * (1.0 / p as f32)).to_bits(), "rank {r} bucket {b} [{i}]");
            }
            // Fragments of at most 100 bytes: rd below the 1024-byte threshold.
            assert_eq!(d.algorithm, Algorithm::Rd.name());
            assert!(d.started <= d.finished);
            // The comm thread's own CPU clock: it cannot run longer than it was inside the
            // bucket (a process clock, summing the other ranks' threads, could).
            assert!(d.cpu <= d.busy, "bucket {b}: cpu {:?} over busy {:?}", d.cpu, d.busy);
            if lens[b] >= 300 {
                assert!(d.cpu > Duration::ZERO, "bucket {b}: averaging took no CPU");
            }
        }
        // Hooks: before then after for each fragment, fragments in order, covering each bucket.
        for (b, &n) in lens.iter().enumerate() {
            let mine: Vec<_> = hooks.iter().filter(|h| h.0 == b).collect();
            let expect_frags = if n == 0 { 1 } else { n.div_ceil(25) };
            assert_eq!(mine.len(), 2 * expect_frags, "bucket {b}: hooks of {expect_frags} fragments");
            let mut next = 0;
            for pair in mine.chunks(2) {
                assert_eq!((pair[0].1, pair[1].1), ('b', 'a'));
                assert_eq!(pair[0].2, pair[1].2);
                assert_eq!(pair[0].2.start, next);
                next = pair[0].2.end;
            }
            assert_eq!(next, n, "bucket {b} fragments cover it");
        }
        // Buckets ran in submission order.
        let order: Vec<usize> = hooks.iter().map(|h| h.0).collect();
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
        // 4000 bytes in 100-byte fragments: still rd.
        assert_eq!(algo, Algorithm::Rd);
    }
}

#[test]
fn large_buckets_pick_the_large_message_algorithm_per_fragment() {
    for (p, want) in [(4usize, Algorithm::Vhd), (3, Algorithm::Ring)] {
        let handles = start_local_group(p, config(1 << 20, Duration::from_secs(30))).unwrap();
        let out = on_ranks(handles, |r, comm| {
            let n = 300_001; // 1.2 MB: two fragments of ~600 KB, above the threshold
            let data: Vec<f32> = (0..n).map(|i| grad(r, i, 9)).collect();
            let mut req = BucketRequest::new(40_000, "big", data);
            let fragments = Arc::new(Mutex::new(0));
            let counted = fragments.clone();
            req.after_fragment = Some(Box::new(move |_| *counted.lock().unwrap() += 1));
            let mut d = comm.wait(comm.submit(req)).unwrap();
            let table = comm.selection_table();
            let desc = comm.selection_description();
            comm.shutdown().unwrap();
            let frags = *fragments.lock().unwrap();
            (d.algorithm, frags, d.data.as_mut_slice().to_vec(), table, desc)
        });
        for (algo, frags, v, table, desc) in out {
            assert_eq!(algo, want.name());
            assert_eq!(frags, 2);
            assert_eq!(table[0], (0, 1023, Algorithm::Rd));
            assert!(desc.contains("rd below 1KiB") && desc.ends_with(&format!("1KiB-: {want}]")), "{desc}");
            assert_eq!(table[1].2, want);
            for i in (0..v.len()).step_by(1013) {
                let sum: f32 = (0..p).map(|q| grad(q, i, 9)).sum();
                assert_eq!(v[i], sum * (1.0 / p as f32));
            }
        }
    }
}

#[test]
fn helpers_broadcast_gather_and_average() {
    let p = 5;
    let handles = start_local_group(p, config(1 << 20, Duration::from_secs(30))).unwrap();
    let out = on_ranks(handles, |r, comm| {
        assert_eq!(comm.world().rank, r);
        assert_eq!(comm.world().size, p);
        let mean = comm.allreduce_mean(vec![r as f32, 10.0 * r as f32, 1.0]).unwrap();
        let mean64 = comm.allreduce_mean_f64(vec![r as f64 * 0.5, 3.0]).unwrap();
        // Only the root's data counts, whatever the others pass.
        let weights = comm.broadcast_f32(2, if r == 2 { vec![1.5, -2.0, 3.25] } else { vec![] }).unwrap();
        let bytes = comm.broadcast_bytes(4, format!("from {r}").into_bytes()).unwrap();
        let gathered = comm.gather_bytes(vec![r as u8; r]).unwrap();
        comm.barrier().unwrap();
        comm.shutdown().unwrap();
        (mean, mean64, weights, bytes, gathered)
    });
    for (r, (mean, mean64, weights, bytes, gathered)) in out.into_iter().enumerate() {
        assert_eq!(mean, vec![2.0, 20.0, 1.0]);
        assert_eq!(mean64, vec![1.0, 3.0]);
        assert_eq!(weights, vec![1.5, -2.0, 3.25]);
        assert_eq!(bytes, b"from 4".to_vec());
        if r == 0 {
            let g = gathered.expect("rank 0 gets everything");
            assert_eq!(g.len(), p);
            for (q, v) in g.iter().enumerate() {
                assert_eq!(v, &vec![q as u8; q]);
            }
        } else {
            assert!(gathered.is_none());
        }
    }
}

#[test]
fn single_rank_is_a_copy() {
    let comm = dcgan_train::comm::start(config(64, Duration::from_secs(30))).unwrap();
    assert_eq!(comm.world().size, 1);
    assert_eq!(comm.world().mpi_library, "none (single process)");
    let data = vec![1.0f32, -2.5, 3.0];
    let mut d = comm.wait(comm.submit(BucketRequest::new(1, "x", data.clone()))).unwrap();
    assert_eq!(d.data.as_mut_slice(), &data[..]);
    assert_eq!(comm.allreduce_mean(data.clone()).unwrap(), data);
    assert_eq!(comm.broadcast_bytes(0, vec![7]).unwrap(), vec![7]);
    assert_eq!(comm.gather_bytes(vec![3]).unwrap(), Some(vec![vec![3]]));
    comm.shutdown().unwrap();
}

#[test]
fn stall_report_names_the_missing_rank_and_the_bucket() {
    let p = 4;
    let stall = Duration::from_millis(400);
    let handles = start_local_group(p, config(1 << 20, stall)).unwrap();
    let start = Instant::now();
    let out = on_ranks(handles, |r, comm| {
        // Every rank finishes one bucket together...
        let t = comm.submit(BucketRequest::new(1, "D.conv1", vec![1.0f32; 10]));
        comm.wait(t).unwrap();
        if r == 2 {
            // ...then rank 2 "computes" for a long time instead of submitting the next one.
            std::thread::sleep(stall * 8);
            return None;
        }
        let t = comm.submit(BucketRequest::new(2, "G.layer1 (convT+bn)", vec![1.0f32; 10]));
        let err = comm.wait(t).err().map(|e| e.to_string());
        // A failed engine refuses further work instead of hanging.
        let again = comm.barrier().err().map(|e| e.to_string());
        Some((err, again))
    });
    assert!(start.elapsed() < Duration::from_secs(30), "no hang");
    for (r, o) in out.into_iter().enumerate() {
        if r == 2 {
            continue;
        }
        let (err, again) = o.unwrap();
        let err = err.expect("the bucket must fail with a stall report");
        assert!(err.contains(&format!("rank {r}: stall")), "{err}");
        assert!(err.contains("G.layer1 (convT+bn)"), "{err}");
        assert!(err.contains("collective #2"), "{err}");
        // The other waiting ranks detect the stall at the same moment and may be busy with
        // their own reports (then they count as not answering): rank 2 must be named.
        let list = err.lines().find_map(|l| l.trim().strip_prefix("ranks that have not arrived at collective #2: "));
        let list: Vec<&str> = list.expect("the list of missing ranks").split(", ").collect();
        assert!(list.contains(&"2") && !list.contains(&r.to_string().as_str()), "{err}");
        assert!(err.contains("rank 2: has not arrived: idle after collective #1"), "{err}");
        assert!(again.unwrap().contains("failed earlier"));
    }
}

#[test]
fn stall_report_when_ranks_submit_buckets_in_different_orders() {
    let p = 2;
    let handles = start_local_group(p, config(1 << 20, Duration::from_millis(400))).unwrap();
    let out = on_ranks(handles, |r, comm| {
        let (first, second) = if r == 0 { (5, 6) } else { (6, 5) };
        let a = comm.submit(BucketRequest::new(first, format!("bucket{first}"), vec![1.0f32; 100]));
        let b = comm.submit(BucketRequest::new(second, format!("bucket{second}"), vec![1.0f32; 100]));
        let ea = comm.wait(a).err().map(|e| e.to_string());
        let _ = comm.wait(b);
        // Stay up while the other rank asks where this one is.
        std::thread::sleep(Duration::from_millis(2500));
        ea
    });
    for (r, e) in out.into_iter().enumerate() {
        let e = e.unwrap_or_else(|| panic!("rank {r}: mismatched buckets must not succeed"));
        assert!(e.contains("every rank has reached collective #1"), "{e}");
    }
}

#[test]
fn config_rejects_tuning_file_with_a_fixed_algorithm() {
    use dcgan_train::comm::{AllreduceChoice, CommOptions};
    let tuning = |file: &std::path::Path| CommOptions { allreduce_tuning: Some(file.into()), ..CommOptions::default() };
    let mut args = tuning("rules.csv".as_ref());
    args.allreduce = AllreduceChoice::Fixed(Algorithm::Rd);
    let e = CommConfig::from_options(&args).unwrap_err().to_string();
    assert!(e.contains("--allreduce-tuning applies to --allreduce auto"), "{e}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("rules.csv");
    std::fs::write(&dir, "ranks,min_bytes,max_bytes,algorithm\n2,0,100,rd\n3,0,inf,vhd\n").unwrap();
    let e = CommConfig::from_options(&tuning(&dir)).unwrap_err().to_string();
    assert!(e.contains(":2: the rules for 2 ranks end at 100 bytes"), "{e}");
    std::fs::write(&dir, "2,0,inf,ring\n").unwrap();
    let cfg = CommConfig::from_options(&tuning(&dir)).unwrap();
    // Every rank fails together: the failing ones print their line ("no rule for 3 ranks",
    // checked under mpiexec in tests/parallel.rs) and all return PeerFailed, printed by none.
    let e = start_local_group(3, cfg.clone()).err().unwrap();
    assert!(e.downcast_ref::<dcgan_train::comm::PeerFailed>().is_some(), "{e:#}");
    let hs = start_local_group(2, cfg).unwrap();
    assert_eq!(hs[0].algorithm_for(4), Algorithm::Ring);
    std::fs::remove_file(&dir).ok();
}

/// A comm thread started with one configuration takes up another (a resumed run learns its
/// allreduce from its checkpoint only once the ranks can talk): the new table, fragments and
/// wire apply to the next bucket on every rank.
#[test]
fn a_reconfigured_comm_thread_uses_the_new_table_fragments_and_wire() {
    let p = 2;
    let handles = start_local_group(p, config(0, Duration::from_secs(30))).unwrap();
    let results = on_ranks(handles, |r, mut comm| {
        let before = comm.algorithm_for(4000);
        let cfg = CommConfig {
            policy: Policy::Fixed(Algorithm::Ring),
            fragment_bytes: 400,
            wire: dcgan_train::comm::Wire::Bf16,
            ..config(0, Duration::from_secs(30))
        };
        comm.reconfigure(&cfg).unwrap();
        // 1 + 2^-12 is not a bf16 value: the bf16 wire rounds it before it travels.
        let data = vec![1.0 + (r as f32) / 4096.0; 1000];
        let done = comm.wait(comm.submit(BucketRequest::new(0, "b", data))).unwrap();
        let out = (before, comm.algorithm_for(4000), comm.fragments_of(1000).len(), comm.selection_description());
        let mut bucket = done.data;
        let first = bucket.as_mut_slice()[0];
        comm.shutdown().unwrap();
        (out, done.algorithm, first)
    });
    for ((before, after, fragments, described), used, first) in results {
        assert_eq!((before, after, used), (Algorithm::Vhd, Algorithm::Ring, Algorithm::Ring.name()));
        assert_eq!(fragments, 10, "400-byte fragments of 1000 floats");
        assert!(described.starts_with("--allreduce ring"), "{described}");
        assert_eq!(first, 1.0, "the value travelled as bf16 (exact f32 would give 1 + 2^-13)");
    }
}
