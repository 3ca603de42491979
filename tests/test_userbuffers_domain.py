"""Megatron's TP-comm overlap (TransformerEngine's userbuffers) runs only on TP groups inside one NVLink domain.

TE @ d0067d0 makes each TP group the userbuffers' NVLink group (transformer_engine/pytorch/module/base.py L305-320)
and maps its buffers as peer memory (userbuffers-host.cpp L286-291: POSIX handles over Unix-domain sockets on one
host, unless a multi-node NVLink fabric; L664: CUDA IPC for at most 8 GPUs). Megatron's rank order (tp-cp-ep-dp-pp)
puts a TP group on consecutive ranks, and btacalc's NVLink domains are blocks of `--gpus-per-node` consecutive
ranks, so every TP group lies in one domain exactly when TP divides the devices of a domain. hostile30 (Q3) found
`--tp 8 --gpus-per-node 4 --tp-comm-overlap` planned as overlapped."""

from __future__ import annotations

import pytest

from btacalc.config.megatron_rules import userbuffers_domain_refusal


def _groups_inside(tp: int, devices: int, domain: int) -> bool:
    """The rule written out: rank r is in TP group r // tp and in domain r // domain; every group inside one domain."""
    return all(len({r // domain for r in range(g * tp, (g + 1) * tp)}) == 1 for g in range(devices // tp))


@pytest.mark.parametrize("tp, devices, domain", [
    (8, 16, 4), (4, 16, 4), (2, 16, 4), (4, 12, 6), (2, 12, 6), (3, 12, 6), (8, 24, 12), (4, 24, 12),
    (16, 144, 72), (8, 144, 72), (8, 8, 72), (16, 16, 72), (1, 8, 4)])
def test_the_refusal_is_the_rank_placement(tp, devices, domain):
    assert (userbuffers_domain_refusal(tp, devices, domain) is None) == _groups_inside(tp, devices, domain)


def test_a_plan_across_domains_is_refused_in_one_line(cli):
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "-n", "16", "--tp", "8", "--gpus-per-node", "4",
                         "--tp-comm-overlap")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "span two domains" in err and "--no-tp-comm-overlap" in err and "userbuffers-host.cpp" in err
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "-n", "16", "--tp", "4", "--gpus-per-node", "4",
                         "--tp-comm-overlap")
    assert code == 0 and "overlapped: tp_comm" in " ".join(out.split()), err  # inside a domain: planned, overlapped
    code, out, err = cli("plan", "-m", "llama-3-8b", "--hw", "h100", "-n", "16", "--tp", "8", "--gpus-per-node", "4")
    assert code == 0, err  # without the overlap NCCL crosses domains: planned


def test_a_search_does_not_rank_what_plan_refuses(cli):
    """With 12 GPUs per domain TP 8 fits under the domain's size but its groups straddle domains (ranks 8-15):
    a search with the TP overlap does not evaluate it (plan would refuse it). Counted: the search with the overlap
    evaluates the search without it less the TP 8 layouts (its `--tp 8` search), and ranks no TP 8."""
    import json

    base = ("plan", "-m", "llama-3-8b", "--hw", "h100", "-n", "24", "--gpus-per-node", "12", "--search",
            "--global-batch", "96", "--json")
    counts = {}
    for name, extra in (("overlap", ("--tp-comm-overlap",)), ("none", ()), ("tp8", ("--tp", "8"))):
        code, out, err = cli(*base, *extra)
        assert code == 0, err
        counts[name] = json.loads(out)
    assert counts["tp8"]["candidates"] > 0
    assert counts["overlap"]["candidates"] == counts["none"]["candidates"] - counts["tp8"]["candidates"]
    assert all(r["tensor_parallel"] != 8 for r in counts["overlap"]["ranking"])
    code, out, err = cli(*base[:-1], "--tp", "8", "--tp-comm-overlap")  # asked for: refused, as plan refuses it
    assert code == 2 and "span two domains" in err, err
