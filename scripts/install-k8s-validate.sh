#!/usr/bin/env bash
# Install the npm packages that tests/deploy/test_deploy.py checks
# deploy/kubernetes/ with, offline: kubernetes-models (Kubernetes' own
# OpenAPI schemas, compiled into validators) and yaml (the parser), at the
# versions pinned in tests/deploy/package-lock.json, into
# tests/deploy/node_modules/ (git-ignored). Idempotent: nothing to do when
# they are there at those versions. Needs node and npm (scripts/install-deps.sh
# test installs them, then runs this).
set -euo pipefail
cd "$(dirname "$0")/../tests/deploy"
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "install-k8s-validate: node and npm are needed (scripts/install-deps.sh test installs them)" >&2
  exit 1
fi
if cmp -s package-lock.json node_modules/.psbench-installed 2>/dev/null; then
  echo "install-k8s-validate: tests/deploy/node_modules present"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
cp package-lock.json node_modules/.psbench-installed
echo "install-k8s-validate: installed into tests/deploy/node_modules"
