"""``make test``'s two pytest-xdist workers (``--dist loadfile``) get the longest modules first (tests/conftest.py,
``LONGEST_FIRST``), whatever their number of tests: pytest-xdist's own order (``--loadscope-reorder``, its default)
hands out the modules with the most tests first, so the notebook modules (the longest, ten tests or fewer each) went
out in the second half. Checked on pytest-xdist's own scheduler, with two stand-in workers."""

from __future__ import annotations

from types import SimpleNamespace

from xdist.scheduler import LoadFileScheduling

from tests.conftest import LONGEST_FIRST, keep_longest_first

LONG = LONGEST_FIRST[0]  # a long module of few tests
MANY = "tests/test_many.py"  # a short module of many tests


class Worker:
    """What the scheduler asks of a worker: the tests it is sent, in order."""

    shutting_down = False

    def __init__(self, name: str):
        self.sent: list[int] = []
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes):
        self.sent.extend(indexes)

    def shutdown(self):
        self.shutting_down = True


def _first_modules(reorder_fix: bool) -> list[str]:
    config = SimpleNamespace(option=SimpleNamespace(loadscopereorder=True), getvalue=lambda name: ["2*popen"])
    if reorder_fix:
        keep_longest_first(config)
    # a worker's collection as _LongestFirst leaves it: the long module first, then the rest in file order
    collection = [f"{LONG}::test_{i}" for i in range(3)] + [f"{MANY}::test_{i}" for i in range(50)]
    collection += [f"tests/test_other_{k}.py::test_{i}" for k in range(4) for i in range(5)]
    sched = LoadFileScheduling(config)
    workers = [Worker("gw0"), Worker("gw1")]
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, collection)
    sched.schedule()
    return [collection[w.sent[0]].split("::")[0] for w in workers]


def test_the_longest_module_goes_out_first_whatever_its_number_of_tests():
    assert _first_modules(reorder_fix=True)[0] == LONG
    assert LONG not in _first_modules(reorder_fix=False)  # xdist's own order: the module of 50 tests first
