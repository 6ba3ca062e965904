"""Shared test configuration: hypothesis profiles (CI is bounded so the suite stays fast);
the simplifier in strict mode (a failure raises instead of returning its input); the
`cache_dir` fixture."""
import os

os.environ.setdefault("TENSORLANG_STRICT", "1")

import pytest
from hypothesis import HealthCheck, settings

from examples_util import HYPOTHESIS_PROFILE

settings.register_profile(
    "ci", max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "dev", max_examples=60, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile(
    "thorough", max_examples=1000, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(HYPOTHESIS_PROFILE)


def pytest_configure(config: pytest.Config) -> None:
    """`--dist loadfile` hands out whole files; pytest-xdist orders them by their number of
    tests, most first, so the files of a few long tests (test_determinism, test_box_stages,
    test_row_panels) came last, and one worker ran them after the other had finished.  In
    file order the last files are short ones and the workers finish together."""
    if getattr(config.option, "loadscopereorder", None):
        config.option.loadscopereorder = False


def _in_process_memos() -> tuple[dict, ...]:
    from tensorlang import api
    from tensorlang.backends import kernel_cache, numba_cpu

    return (api._CHECKED, api._FINAL_PROGRAMS, api._FINAL_FAILURES,  # noqa: SLF001
            numba_cpu._COMPILED, kernel_cache._MODULES)  # noqa: SLF001


def forget_in_process() -> None:
    """Drop this process's memos of checked modules, final programs and kernels, so that the
    next use reads the disk cache (or builds) as a fresh process would."""
    for memo in _in_process_memos():  # a fresh process's view of the cache
        memo.clear()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cache folder for this test, and no in-process memos during it.

    Every test that patches the compiler (a deliberately wrong lowering, a broken stage, other
    kernel split settings) uses it: what it builds must never reach the shared cache, where a
    later test or `tl prove` would load it as the real compiler's output.  Afterwards the
    memos are the ones from before the test (what it memoised is dropped), so that later
    tests do not load and check again what this process had."""
    from tensorlang import cache
    from tensorlang.backends.numba_cpu import ENV_ENGINE

    path = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_DIR, str(path))
    monkeypatch.delenv(cache.ENV_MAX_MB, raising=False)
    monkeypatch.delenv(ENV_ENGINE, raising=False)
    before = [dict(memo) for memo in _in_process_memos()]
    forget_in_process()
    yield path
    forget_in_process()
    for memo, items in zip(_in_process_memos(), before):
        memo.update(items)
