"""The torch custom ops (rocenante.torch_ops): run where torch is installed; `import rocenante` never needs torch."""
import subprocess
import sys

import pytest


def test_import_rocenante_does_not_import_torch():
    code = "import sys, rocenante; assert 'torch' not in sys.modules, 'rocenante imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_custom_ops_on_cpu_tensors_as_threads():
    torch = pytest.importorskip("torch", reason="torch is not installed in this environment")
    import threading

    import rocenante
    import rocenante.torch_ops as rops

    n = 2
    world = rocenante.World(n)
    results = [None] * n

    def one(rank):
        try:
            with rocenante.Communicator.in_process(world, rank) as c:
                h = rops.register(c)
                x = torch.full((4, 3), float(rank + 1), dtype=torch.bfloat16)
                y = torch.ops.rocenante.all_reduce(x, h, "auto")
                g = torch.ops.rocenante.all_gather(x, h)
                rops.unregister(h)
                results[rank] = (x.float().sum().item(), y.float().unique().tolist(), tuple(g.shape),
                                 g[1].float().unique().tolist())
        except BaseException as e:  # noqa: BLE001
            results[rank] = e

    ts = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    [t.start() for t in ts]
    [t.join(60) for t in ts]
    for rank, r in enumerate(results):
        assert r == ((rank + 1) * 12.0, [3.0], (2, 4, 3), [2.0]), r
