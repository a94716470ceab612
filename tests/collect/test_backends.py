"""The Kineto backend records what the script does and adds nothing the script did not ask for."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_preparing_the_profiler_does_not_import_inductor(tmp_path) -> None:
    """torch.profiler's prepare_trace asks ``hasattr(torch, "_inductor")``, which imports inductor (seconds of
    the user's wait) in a script that never compiles; the backend answers it without the import."""
    trace = tmp_path / "t.json"
    code = textwrap.dedent(f"""
        import sys, torch
        from advisor.collect.backends import KinetoBackend
        from advisor.collect.config import CollectorConfig
        backend = KinetoBackend(CollectorConfig(script="x.py"), {str(trace)!r})
        backend.prepare()
        backend.start(0)
        torch.ones(4) * 2
        backend.stop()
        print("inductor" if "torch._inductor" in sys.modules else "no inductor", torch.__getattr__ is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["no", "inductor"], out.stdout
    assert trace.stat().st_size > 0
    # torch's lazy attributes still work after the backend put its own lookup back
    assert out.stdout.split()[-1] == "True"
