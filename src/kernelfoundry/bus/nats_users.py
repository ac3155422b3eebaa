"""Print the NATS users of a deployment: the server's `authorization` block, or the Secret of passwords.

    python -m kernelfoundry.bus.nats_users --generator heuristic --build-target cpu.x86_64 \\
        --build-target cuda.sm90 --executor cpu.x86_64 --executor cuda.h200 > auth.conf
    python -m kernelfoundry.bus.nats_users ... --secret    # kubectl apply -f - (random passwords)

deploy/k8s/base/nats.yaml holds the block for the manifests' own pools (a test keeps the two equal);
run this after adding a generator, build target or executor pool, and put its output there.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from collections.abc import Sequence

from kernelfoundry.bus.permissions import ServiceUser, deployment_users, render_authorization

SECRET_NAME = "kf-nats-users"


def render_secret(users: Sequence[ServiceUser], passwords: dict[str, str]) -> str:
    """A Kubernetes Secret with each user's password under its server variable's name."""
    lines = [
        "apiVersion: v1",
        "kind: Secret",
        "metadata:",
        f"  name: {SECRET_NAME}",
        "type: Opaque",
        "stringData:",
    ]
    lines += [f"  {u.password_variable}: {passwords[u.name]}" for u in users]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--generator", action="append", default=[], help="a generator an llm pool serves")
    parser.add_argument("--build-target", action="append", default=[], help="a compiler pool's build target")
    parser.add_argument("--executor", action="append", default=[], help="an executor pool's hardware")
    parser.add_argument("--secret", action="store_true", help="print the Secret of random passwords instead")
    args = parser.parse_args(argv)
    users = deployment_users(args.generator, args.build_target, args.executor)
    if args.secret:
        sys.stdout.write(render_secret(users, {u.name: secrets.token_hex(24) for u in users}))
    else:
        sys.stdout.write(render_authorization(users))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
