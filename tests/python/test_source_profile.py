"""benchmarks/source_profile.py on a small source-counters CSV in Nsight Compute's layout: the hot
path is the execution count holding the most samples, runs of one opcode fold together, and
shares and stall reasons add up."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
          "Instructions Executed", "stall_wait", "stall_barrier", "stall_wait (Not Issued)"]


def row(address, source, samples, executed, wait, barrier):
    return [hex(address), source, str(samples), str(samples), str(executed), str(wait), str(barrier), "0"]


def test_hot_path_runs_and_shares(tmp_path):
    rows = [
        row(0x1000, "LDC R1, c[0x0][0x28]", 5, 1, 5, 0),  # once: not the hot path
        row(0x1010, "MUFU.EX2 R2, R2", 30, 64, 30, 0),
        row(0x1020, "MUFU.EX2 R3, R3", 30, 64, 20, 10),
        row(0x1030, "@P0 FADD R4, R2, R3", 20, 64, 0, 20),
        row(0x1040, "BAR.SYNC.DEFER_BLOCKING 0x3, 0x100", 20, 64, 0, 20),
        row(0x1050, "FADD R9, R9, 1", 4, 2, 4, 0),  # a rare branch
    ]
    text = '"Kernel Name","k",\n' + "\n".join(",".join(f'"{c}"' for c in r) for r in [HEADER, *rows]) + "\n"
    path = tmp_path / "src.csv"
    path.write_text(text)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "source_profile.py"), str(path)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert "the path: 4 instructions executed 64 times, 100 samples" in out[0]
    runs = [line.split() for line in out[2:]]
    assert [r[1] for r in runs] == ["MUFU.EX2", "FADD", "BAR.SYNC.DEFER_BLOCKING"]
    assert [r[2] for r in runs] == ["2", "1", "1"]
    assert [r[3] for r in runs] == ["60.0%", "20.0%", "20.0%"]
    assert runs[-1][4] == "100.0%"
    assert "wait 83 %" in out[2] and "barrier 17 %" in out[2]
