//! The markdown that `simulate-scaling` prints: the replay's settings in words, then one row
//! per algorithm and node count.

use super::comm_cpu::SharedCores;
use super::core_share::ShareSource;
use super::simulate::{Prediction, Row};
use crate::comm::Wire;
use crate::units::format_bytes;

/// `"G[1] vhd x5, D[3+2] vhd, D[1] rd"`: the algorithm per bucket (and fragments when cut).
fn bucket_summary(row: &Row, fragment_bytes: usize) -> String {
    row.buckets
        .iter()
        .map(|b| {
            let k = crate::comm::handle::fragments(b.bytes / 4, fragment_bytes).len();
            if k > 1 { format!("{} {} x{k}", b.bucket, b.algorithm) } else { format!("{} {}", b.bucket, b.algorithm) }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the replayed run's share of a core scales the two figures, in words.
fn core_share_sentence(pred: &Prediction) -> String {
    let shared = SharedCores {
        cpu_ns_per_byte: pred.comm_cpu_ns_per_byte,
        comm_speed_beside_compute: pred.comm_speed_beside_compute,
        core_share: pred.core_share,
    };
    let here = format!(
        "{:.2} ns per byte and {:.0}% of wire speed",
        shared.cpu_ns_per_byte_here(),
        100.0 * shared.speed_here()
    );
    match pred.core_share_from {
        ShareSource::Measured => format!(
            "The replayed run's ranks had {:.0}% of a core (its training thread's CPU time against its wait for one), \
             so here: {here}.",
            100.0 * pred.core_share
        ),
        ShareSource::RunHadExchange => format!(
            "The replayed run had the exchange, whose comm thread took part of its core, so its ranks are taken to have \
             a core each ({here}); replay a --no-exchange run to count cores shared between ranks."
        ),
        ShareSource::NotRecorded => format!(
            "The replayed run does not record its wait for a core, so its ranks are taken to have a core each ({here})."
        ),
        ShareSource::NotUsed => String::new(),
    }
}

pub fn markdown(pred: &Prediction, fragment_bytes: usize) -> String {
    let mut s = format!(
        "Replay of {} (rank {}'s compute track, steps {:?}: {:.1} ms of compute per step; the run measured {:.1} ms/step on {} rank(s)) \
         with alpha {:.2} us, beta {:.3} ns/B ({:.3} Gbit/s), gamma {:.3} ns/B, fragments of {}, gradients on the wire as {}.\n\n",
        pred.trace,
        pred.trace_rank,
        pred.replayed_steps,
        pred.compute_ms_per_step,
        pred.measured_ms_per_step,
        pred.measured_ranks,
        pred.alpha_us,
        pred.beta_ns_per_byte,
        8.0 / pred.beta_ns_per_byte.max(1e-12),
        pred.gamma_ns_per_byte,
        format_bytes(fragment_bytes),
        match pred.wire {
            Wire::F32 => "f32",
            Wire::Bf16 => "bf16 (half the bytes)",
            Wire::OneBit => "1bit (its bytes on the chosen algorithm's pattern)",
        },
    );
    s.push_str(if pred.identical_ranks {
        "Every rank replays the same recorded step at the same time (--identical-ranks): no rank waits for another.\n\n"
    } else {
        "Each rank replays the recorded steps in an order of its own, so a rank whose step ran long is waited for \
         (column \"of it, slowest rank\"); --identical-ranks leaves that out.\n\n"
    });
    if pred.comm_cpu_ns_per_byte > 0.0 || pred.comm_speed_beside_compute < 1.0 {
        s.push_str(&format!(
            "Compute and the exchange share cores: while both run at once, the exchange takes {:.2} ns of compute per \
             byte a rank moves each way and keeps {:.0}% of its wire speed, for a rank with a core of its own{}. {}\n\n",
            pred.comm_cpu_ns_per_byte,
            100.0 * pred.comm_speed_beside_compute,
            match &pred.comm_cpu_from {
                Some(c) => format!(
                    " (measured from {} against {}: compute {:.1} ms/step against {:.1}, for {} moved each way per step, \
                     {:.0}% of it beside compute; comm {:.1} ms/step against the model's {:.1}, which the replay of the \
                     second run's trace gives at that speed times its ranks' share of a core; the closed formula gave {:.0}%; its ranks had {:.0}% of a \
                     core)",
                    c.with_exchange,
                    c.without_exchange,
                    c.compute_with_ms,
                    c.compute_without_ms,
                    format_bytes(c.bytes_moved_per_step as usize),
                    100.0 * c.hidden_comm_fraction,
                    c.comm_measured_ms,
                    c.comm_model_ms,
                    100.0 * c.comm_speed_formula,
                    100.0 * c.core_share
                ),
                None => String::new(),
            },
            core_share_sentence(pred)
        ));
    }
    let several = pred.ranks_per_node > 1;
    if several {
        s.push_str(&format!(
            "Nodes of {} ranks each, in blocks: messages between ranks of one node take alpha {:.2} us and beta {:.3} ns/B \
             (shared memory); the ranks of a node share its network link. Speedup and efficiency count ranks.\n\n",
            pred.ranks_per_node, pred.intra_alpha_us, pred.intra_beta_ns_per_byte
        ));
    }
    let cpu = pred.comm_cpu_ns_per_byte > 0.0;
    s.push_str(if several { "| nodes | ranks " } else { "| nodes " });
    s.push_str(
        "| algorithm | step ms | speedup eq.(1) | efficiency | comm ms/step | exposed ms/step | of it, slowest rank ",
    );
    s.push_str(if cpu { "| compute lost to its CPU ms/step " } else { "" });
    s.push_str("| hidden | algorithm per bucket |\n");
    s.push_str(if several { "|---:|---:" } else { "|---:" });
    s.push_str(if cpu {
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
    } else {
        "|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
    });
    for r in &pred.rows {
        let who = if several { format!("{} | {}", r.nodes, r.ranks) } else { r.nodes.to_string() };
        let lost = if cpu { format!(" {:.1} |", r.comm_cpu_ms_per_step) } else { String::new() };
        s.push_str(&format!(
            "| {who} | {} | {:.1} | {:.2} | {:.3} | {:.1} | {:.1} | {:.1} |{lost} {:.3} | {} |\n",
            r.algorithm,
            r.step_ms,
            r.speedup_eq1,
            r.efficiency,
            r.comm_ms_per_step,
            r.exposed_comm_ms_per_step,
            r.slowest_rank_ms_per_step,
            r.hidden_comm_fraction,
            if r.ranks > 1 { bucket_summary(r, fragment_bytes) } else { "-".into() }
        ));
    }
    s
}
