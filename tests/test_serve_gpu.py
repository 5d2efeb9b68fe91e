"""`cgprof run serve` on a real GPU: graph buckets captured with CUDA graphs, answers checked.

Skipped without CUDA. On the GPU machine: ``python -m pytest -q tests/test_serve_gpu.py -s``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from test_serve import check_answers  # noqa: E402

from cgprof.runners import capture  # noqa: E402
from cgprof.runners.serve import LevelRecord, run_serve  # noqa: E402
from cgprof.runners.serving import ServeConfig, format_serve_table  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


@pytest.mark.parametrize(("model", "size"), [("mlp", "full"), ("resnet18", "tiny")])
def test_graph_buckets_answer_each_client_with_its_rows(model, size):
    cfg = ServeConfig(model=model, size=size, device="cuda", mode="both", clients=(1, 8),
                      max_batch=8, duration_s=0.5, warmup_s=0.2, keep_rows=True)
    records: list[LevelRecord] = []
    with capture.fp32_strict():
        result = run_serve(cfg, records=records)
        for rec in records:
            # the reference runs on the GPU too (resnet18: channels-last, as the server runs it)
            check_answers(cfg, rec, device="cuda", rtol=1e-3, atol=1e-4)
    print(format_serve_table(result))
    assert result.graph_stats is not None
    stats = result.graph_stats
    # every bucket (1, 2, 4, 8) captured once before the first level; never run eagerly
    assert (stats["captures"], stats["fallbacks"], stats["recaptures"]) == (4, 0, 3)
    for lv in result.levels:
        assert lv.gpu_busy_pct is not None and 0.0 < lv.gpu_busy_pct <= 100.0
        assert (lv.lost, lv.duplicates) == (0, 0)
