"""Reports on the output of the benchmark scripts: the figures dcgan-train wrote
(summary.json, simulate-scaling's and ping-pong's JSON) read, combined over runs and repeats,
and set against targets and the cost model.

    python3 scripts/reports scaling OUT [--no-plot]
    python3 scripts/reports allreduce-vs-model MODEL.json [--links LINKS.json] [--shaped FILE] [--cores N]
    python3 scripts/reports overlap NAME=SUMMARY.json...
    python3 scripts/reports quality OUT [--no-plot]
    python3 scripts/reports losses OUT [--no-plot]
    python3 scripts/reports wire OUT
    python3 scripts/reports wire-quality OUT [--links WIRE/results.json]
    python3 scripts/reports pipeline OUT

Python's standard library only, but for the plot (matplotlib).
"""

import argparse
import os
import sys

import allreduce_vs_model
import losses_report
import overlap_report
import pipeline_report
import quality_report
import scaling_report
import wire_quality_report
import wire_report


def main():
    ap = argparse.ArgumentParser(prog="python3 scripts/reports", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)

    s = sub.add_parser("scaling", help="results.md, results.json and speedup.png of a bench-scaling.sh folder")
    s.add_argument("out", metavar="OUT", help="the folder bench-scaling.sh wrote")
    s.add_argument("--no-plot", action="store_true", help="leave out speedup.png (no matplotlib needed)")

    a = sub.add_parser("allreduce-vs-model", help="bench-allreduce rows against the cost model, and what is outside 1.25x")
    a.add_argument("model", metavar="MODEL.json",
                   help="simulate-scaling --bench-allreduce ... --json; its table MODEL.md beside it is included")
    a.add_argument("--links", metavar="LINKS.json",
                   help="ping-pong --json of the links the rows ran on (its beta weighs a row against the token bucket)")
    a.add_argument("--shaped", metavar="FILE", help="cluster-emulate.sh's up or reshape output for those links")
    a.add_argument("--cores", type=int, default=os.cpu_count() or 1,
                   help="the machine's cores: rows with more ranks are not judged (default: this machine's)")

    o = sub.add_parser("overlap", help="runs with the exchange overlapped, after backward and skipped, side by side")
    o.add_argument("summaries", metavar="NAME=SUMMARY.json", nargs="+",
                   help="overlap=, no-overlap= and no-exchange= the three runs' summary.json")

    q = sub.add_parser("quality", help="results.md, results.json and quality.png of a bench-quality.sh folder")
    q.add_argument("out", metavar="OUT", help="the folder bench-quality.sh wrote")
    q.add_argument("--no-plot", action="store_true", help="leave out quality.png (no matplotlib needed)")

    w = sub.add_parser("losses", help="results.md, results.json and losses.png of a bench-losses.sh folder")
    w.add_argument("out", metavar="OUT", help="the folder bench-losses.sh wrote")
    w.add_argument("--no-plot", action="store_true", help="leave out losses.png (no matplotlib needed)")

    r = sub.add_parser("wire", help="results.md and results.json of a bench-wire.sh folder")
    r.add_argument("out", metavar="OUT", help="the folder bench-wire.sh wrote")

    wq = sub.add_parser("wire-quality", help="results.md, results.json and quality.png of a bench-wire-quality.sh folder")
    wq.add_argument("out", metavar="OUT", help="the folder bench-wire-quality.sh wrote")
    wq.add_argument("--links", metavar="RESULTS.json",
                    help="a bench-wire.sh results.json: the distance also against the time on those links")

    pp = sub.add_parser("pipeline", help="results.md and results.json of a bench-pipeline.sh folder")
    pp.add_argument("out", metavar="OUT", help="the folder bench-pipeline.sh wrote")

    args = ap.parse_args()
    if args.command == "scaling":
        scaling_report.main(args.out, plot=not args.no_plot)
    elif args.command == "allreduce-vs-model":
        allreduce_vs_model.main(args.model, args.links, args.shaped, args.cores)
    elif args.command == "quality":
        quality_report.main(args.out, plot=not args.no_plot)
    elif args.command == "losses":
        losses_report.main(args.out, plot=not args.no_plot)
    elif args.command == "wire":
        wire_report.main(args.out)
    elif args.command == "wire-quality":
        wire_quality_report.main(args.out, args.links)
    elif args.command == "pipeline":
        pipeline_report.main(args.out)
    else:
        overlap_report.main(args.summaries)


if __name__ == "__main__":
    sys.exit(main())
