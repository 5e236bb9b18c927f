"""Provenance: a run records the commit it was launched from and whether the tree was clean (docs/runs.md)."""

import platform
import subprocess
from importlib import metadata

from mbexp.run.identity import git_clean, git_commit, resumed_provenance, versions


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_a_clean_tree_is_one_with_no_change_outside_results(tmp_path):
    repo = tmp_path / "repo"
    (repo / "mbexp").mkdir(parents=True)
    (repo / "results" / "runs").mkdir(parents=True)
    (repo / "mbexp" / "model.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert git_commit(repo / "mbexp") == head.strip() and len(head.strip()) == 40
    assert git_clean(repo / "mbexp") is True
    (repo / "results" / "runs" / "summary.json").write_text("{}")  # runs land in results/: still clean
    assert git_clean(repo / "mbexp") is True
    (repo / "mbexp" / "new.py").write_text("")  # an untracked source file: the commit is not the code that ran
    assert git_clean(repo / "mbexp") is False
    (repo / "mbexp" / "new.py").unlink()
    (repo / "mbexp" / "model.py").write_text("x = 2\n")
    assert git_clean(repo / "mbexp") is False
    assert git_clean(tmp_path) is None and git_commit(tmp_path) == "unknown"  # not a checkout


def test_a_resume_keeps_its_launch_and_adds_what_it_ran_on():
    launch = {"git_commit": "a" * 40, "git_clean": True}
    same = resumed_provenance(launch, {"git_commit": "a" * 40, "git_clean": True})
    assert same == {"git_commit": "a" * 40, "git_clean": True, "git_resumed": []}
    moved = resumed_provenance(same, {"git_commit": "b" * 40, "git_clean": True})
    assert moved == {"git_commit": "a" * 40, "git_clean": True, "git_resumed": ["b" * 40]}
    dirty = resumed_provenance(moved, {"git_commit": "b" * 40, "git_clean": False})
    assert dirty["git_clean"] is False and dirty["git_resumed"] == ["b" * 40]
    # a checkpoint from before provenance was recorded: the launch is unknown, so never clean
    old = resumed_provenance(None, {"git_commit": "c" * 40, "git_clean": True})
    assert old["git_clean"] is None


def test_a_third_start_keeps_every_commit_the_run_was_resumed_on():
    launch = {"git_commit": "a" * 40, "git_clean": True, "git_resumed": ["b" * 40]}
    third = resumed_provenance(launch, {"git_commit": "c" * 40, "git_clean": True})
    assert third == {"git_commit": "a" * 40, "git_clean": True, "git_resumed": ["b" * 40, "c" * 40]}
    assert resumed_provenance(third, {"git_commit": "b" * 40, "git_clean": True})["git_resumed"] == ["b" * 40, "c" * 40]


def test_a_jobs_command_is_its_overrides_after_the_module_and_none_outside_hydra():
    from hydra.core.hydra_config import HydraConfig

    from mbexp.config import compose_config
    from mbexp.run.identity import job_command

    assert job_command() is None
    HydraConfig.instance().set_config(compose_config(["ffn=relu", "seed=3"], return_hydra_config=True))
    try:
        assert job_command() == "python -m mbexp.train ffn=relu seed=3"
    finally:
        HydraConfig.instance().cfg = None
    assert job_command() is None


def test_a_run_records_the_version_of_each_package_that_makes_its_numbers():
    names = ["mbexp", "torch", "hydra-core", "omegaconf", "tokenizers", "datasets", "wandb", "numpy"]
    assert versions() == {**{name: metadata.version(name) for name in names}, "python": platform.python_version()}


def test_a_package_that_is_not_installed_is_recorded_as_not_installed(monkeypatch):
    # the summary's versions name a package missing from the environment in words, not as null
    installed = metadata.version

    def version(name):
        if name == "wandb":
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(metadata, "version", version)
    found = versions()
    assert found["wandb"] == "not installed" and found["torch"] == installed("torch")
