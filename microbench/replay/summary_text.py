"""The replay's summary as the terminal shows it: the iteration, per collective and group, and the prediction."""

from __future__ import annotations


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def as_text(s: dict) -> str:
    """The summary as the terminal shows it (without ``--json``)."""
    w = s["workload"]
    if w:
        part = (f" ({w['layers_replayed']} of its {w['model_layers']} layers replayed)"
                if w["layers_replayed"] != w["model_layers"] else "")
        extra = "".join(f", {k} {w[k]}" for k in ("cp", "ep", "routing") if k in w)  # issue 42
        head = (f"replay: {w['model']}{part}, scheme {w['scheme']} (dp {w['dp']}, tp {w['tp']}, pp {w['pp']}{extra}, "
                f"{w['dtype']}), backend {s['backend']}")
    else:
        head = f"replay: trace, backend {s['backend']}"
    lines = [head, f"  {s['calls_per_iteration']} calls, {s['bytes_per_iteration']} B per iteration per rank",
             f"  iteration wall {_ms(s['wall_s'])} ms (median of {s['iterations']}; min {_ms(s['wall_min_s'])}, "
             f"max {_ms(s['wall_max_s'])}); first (cold) iteration {_ms(s['first_iteration_s'])} ms"]
    if s["compute"]:
        lines.append(f"  compute-only iteration {_ms(s['compute_only_s'])} ms "
                     f"({s['compute']['tflops_per_device']} TFLOP/s); exposed communication "
                     f"{_ms(s['exposed_communication_s'])} ms ({s['exposed_share']:.1%} of the iteration)")
    lines += [f"  {k:<16} {_ms(v):>10} ms" for k, v in s["per_collective_s"].items()]
    lines += [f"  group {g:<10} {_ms(v):>10} ms" for g, v in s["per_group_s"].items()]
    lines += [f"  note: {n}" for n in s["notes"]]
    pred = s["prediction"]
    lines += [f"# predicted from {pred['source']}; ratio = replayed / predicted",
              f"  {'':<18} {'predicted ms':>13} {'replayed ms':>12} {'ratio':>7}  attributed to"]
    for row in s["comparison"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(f"  {row['what']:<18} {_ms(row['predicted_s']):>13} {_ms(row['replayed_s']):>12} {ratio:>7}  "
                     + "; ".join(row["explained_by"]))
    lines += [f"  note: {n}" for n in pred["notes"]]
    if s.get("check"):  # issue 40: replay --check
        c = s["check"]
        lines.append(f"# check: {c['calls_checked']} call(s) over all ranks run again with known data, "
                     f"{c['failures']} wrong" + "".join(f"\n  {line}" for line in c["failed"]))
    return "\n".join(lines)
