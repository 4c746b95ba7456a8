#!/usr/bin/env bash
# Checks of deploy/: the Kustomize overlays render and pass `kubernetes-validate --strict`
# and `checkov`; the alerting rules pass `promtool check rules` and `promtool test rules`
# and equal the PrometheusRule; both services' /metrics pass `promtool check metrics`.
#
#   deploy/check.sh                              # everything (CI runs this)
#   deploy/check.sh --regenerate-prometheusrule  # rewrite the PrometheusRule from alerts.yaml
#
# Tools: kubectl (with its built-in kustomize) must be on PATH; promtool comes from the
# distribution's `prometheus` package (installed here when missing, with apt-get); checkov
# and kubernetes-validate come from PyPI into a virtualenv pinned by
# deploy/requirements-ci.txt (TOOLGATE_CI_VENV overrides where it lives).
set -euo pipefail
cd "$(dirname "$0")/.."

venv_tools() {
    local req=deploy/requirements-ci.txt
    local key
    key=$(sha256sum "$req" | cut -c1-16)
    VENV=${TOOLGATE_CI_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate-ci/venv-$key}
    if [[ ! -x $VENV/bin/checkov || ! -x $VENV/bin/kubernetes-validate ]]; then
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    fi
}

regenerate_prometheusrule() {
    "$VENV/bin/python" - <<'EOF'
import yaml
rules = yaml.safe_load(open("deploy/monitoring/alerts.yaml"))
doc = {
    "apiVersion": "monitoring.coreos.com/v1",
    "kind": "PrometheusRule",
    "metadata": {"name": "toolgate", "labels": {"app.kubernetes.io/name": "toolgate", "release": "prometheus"}},
    "spec": rules,
}
with open("deploy/kubernetes/monitoring/prometheusrule.yaml", "w") as f:
    f.write("# Generated from deploy/monitoring/alerts.yaml (keep them equal; deploy/check.sh compares\n"
            "# them). Regenerate: deploy/check.sh --regenerate-prometheusrule\n")
    yaml.safe_dump(doc, f, sort_keys=False, width=100)
EOF
}

venv_tools
if [[ ${1:-} == --regenerate-prometheusrule ]]; then
    regenerate_prometheusrule
    exit 0
fi

if ! command -v promtool >/dev/null; then
    sudo=""
    [[ $(id -u) == 0 ]] || sudo=sudo
    # A fresh machine's package lists may be empty or stale: refresh them first.
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends prometheus >/dev/null
fi

out=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT

echo "== kubernetes: render, kubernetes-validate --strict, checkov"
# checkov reads files by extension; one directory per rendering keeps its report readable.
for name in overlays/dev overlays/production monitoring; do
    file=$out/render/${name//\//-}.yaml
    mkdir -p "$out/render"
    kubectl kustomize "deploy/kubernetes/$name" >"$file"
    # CRDs (ServiceMonitor, PrometheusRule) have no schema here: a warning, not a failure.
    "$VENV/bin/kubernetes-validate" --strict --quiet "$file"
done
# Every skip is an annotation on the resource (`checkov.io/skipN: CHECK=reason`); none is
# passed on the command line. --skip-download keeps checkov offline.
"$VENV/bin/checkov" --directory "$out/render" --skip-download --compact --quiet \
    --framework kubernetes secrets

echo "== alerting rules: promtool check rules, promtool test rules"
promtool check rules deploy/monitoring/alerts.yaml
promtool test rules deploy/monitoring/alerts_test.yaml
"$VENV/bin/python" - "$out/render/monitoring.yaml" <<'EOF'
import sys, yaml
plain = yaml.safe_load(open("deploy/monitoring/alerts.yaml"))
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "PrometheusRule"]
assert len(docs) == 1, "one PrometheusRule expected"
if docs[0]["spec"] != plain:
    sys.exit("deploy/kubernetes/monitoring/prometheusrule.yaml differs from deploy/monitoring/alerts.yaml;"
             " run deploy/check.sh --regenerate-prometheusrule")
open(sys.argv[1] + ".rules.yaml", "w").write(yaml.safe_dump(docs[0]["spec"]))
print("PrometheusRule equals deploy/monitoring/alerts.yaml")
EOF
promtool check rules "$out/render/monitoring.yaml.rules.yaml"

echo "== dashboard: every panel query parses (as a recording rule)"
"$VENV/bin/python" - "$out/dashboard-rules.yaml" <<'EOF'
import json, sys, yaml
d = json.load(open("deploy/dashboards/toolgate.json"))
rules = [{"record": f"dashboard:panel{p['id']}:{t['refId']}", "expr": t["expr"]}
         for p in d["panels"] for t in p.get("targets", [])]
yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}, open(sys.argv[1], "w"))
EOF
promtool check rules "$out/dashboard-rules.yaml"

echo "== metrics: promtool check metrics on both services' and toolgate up's /metrics"
cargo build --quiet --locked -p toolgate-policy -p toolgate-executor -p toolgate-cli
target=${CARGO_TARGET_DIR:-target}/debug
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
token() { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n'; }
executor_token=$(token)
agent_token=$(token)
approver_token=$(token)
mkdir -p "$out/workspace"
cat >"$out/tokens.toml" <<EOF
[[tokens]]
principal = "executor"
role = "executor"
token = "$executor_token"
[[tokens]]
principal = "agent-1"
role = "agent"
token = "$agent_token"
[[tokens]]
principal = "alice"
role = "approver"
token = "$approver_token"
EOF
# Traffic below exercises every tier: touch asks a human, terraform is denied, the rest runs.
cat >"$out/rules.toml" <<EOF
default = "auto"
[[rule]]
id = "touch-asks"
decision = "ask"
reason = "the dashboard check needs an approval"
commands = ["touch"]
[[rule]]
id = "no-terraform"
decision = "deny"
reason = "the dashboard check needs a denial"
commands = ["terraform"]
EOF
printf '%s\n' "$executor_token" >"$out/executor.token"
policy_port=$(free_port) policy_metrics=$(free_port)
executor_port=$(free_port) executor_metrics=$(free_port)
cat >"$out/policy.toml" <<EOF
listen = "127.0.0.1:$policy_port"
metrics_listen = "127.0.0.1:$policy_metrics"
policy_file = "$out/rules.toml"
[log]
filter = "warn"
[ledger]
url = "sqlite:$out/ledger.db"
[auth]
tokens_file = "$out/tokens.toml"
EOF
cat >"$out/executor.toml" <<EOF
listen = "127.0.0.1:$executor_port"
metrics_listen = "127.0.0.1:$executor_metrics"
[log]
filter = "warn"
[workspace]
root = "$out/workspace"
[policy]
endpoint = "http://127.0.0.1:$policy_port"
token_file = "$out/executor.token"
[auth]
tokens_file = "$out/tokens.toml"
EOF
"$target/toolgate-policy" --config "$out/policy.toml" >"$out/policy.log" 2>&1 &
pids+=($!)
"$target/toolgate-executor" --config "$out/executor.toml" >"$out/executor.log" 2>&1 &
pids+=($!)
scrape() {
    local name=$1 port=$2
    for _ in $(seq 100); do
        # As an operator scrapes by hand: no Accept header, so the Prometheus text format.
        if curl -fsS -D "$out/$name.headers" "http://127.0.0.1:$port/metrics" \
            >"$out/$name.metrics" 2>/dev/null; then
            echo "-- $name ($(grep -vc '^#' "$out/$name.metrics") samples)"
            grep -qi '^content-type: text/plain; version=0.0.4' "$out/$name.headers"
            promtool check metrics <"$out/$name.metrics"
            echo "   promtool check metrics: no problems"
            # OpenMetrics only when asked for, as Prometheus does.
            curl -fsS -H 'Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5' \
                "http://127.0.0.1:$port/metrics" >"$out/$name.om"
            tail -n1 "$out/$name.om" | grep -qx '# EOF'
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not serve /metrics:" >&2
    cat "$out/$name.log" >&2
    return 1
}
scrape policy "$policy_metrics"
scrape executor "$executor_metrics"
up_metrics=$(free_port)
mkdir -p "$out/up-workspace"
"$target/toolgate" up --workspace "$out/up-workspace" --data-dir "$out/up-data" \
    --executor-listen 127.0.0.1:0 --policy-listen 127.0.0.1:0 --mcp-listen 127.0.0.1:0 \
    --metrics-listen "127.0.0.1:$up_metrics" --json >"$out/up.log" 2>&1 &
pids+=($!)
scrape up "$up_metrics"

echo "== dashboard: every panel query returns series from a real Prometheus after traffic"
prom_port=$(free_port)
cat >"$out/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: toolgate-policy
    static_configs: [{targets: ["127.0.0.1:$policy_metrics"]}]
  - job_name: toolgate-executor
    static_configs: [{targets: ["127.0.0.1:$executor_metrics"]}]
EOF
prometheus --config.file="$out/prometheus.yml" --storage.tsdb.path="$out/prometheus" \
    --web.listen-address="127.0.0.1:$prom_port" >"$out/prometheus.log" 2>&1 &
pids+=($!)
tg() { "$target/toolgate" "$@"; }
export TOOLGATE_EXECUTOR="http://127.0.0.1:$executor_port" TOOLGATE_POLICY="http://127.0.0.1:$policy_port"
(
    export TOOLGATE_TOKEN=$agent_token
    echo "hello" | tg fs write notes.txt >/dev/null
    tg fs read notes.txt >/dev/null
    tg fs ls . >/dev/null
    tg fs read missing.txt >/dev/null 2>&1 || true
    tg run -- echo ran >/dev/null
    tg run --script 'head -c 100000 /dev/zero' >/dev/null
    tg run -- terraform apply >/dev/null 2>&1 || true
    tg run --session dash -- touch approved.txt >/dev/null 2>&1 || true
)
id=$(TOOLGATE_TOKEN=$approver_token tg approvals list | awk '/pending/ {print $1; exit}')
[[ -n $id ]] || { echo "no pending approval to decide" >&2; exit 1; }
TOOLGATE_TOKEN=$approver_token tg approvals approve "$id" >/dev/null
TOOLGATE_TOKEN=$agent_token tg run --session dash -- touch approved.txt >/dev/null
# One more, left pending, for the backlog panel.
TOOLGATE_TOKEN=$agent_token tg run --session dash -- touch pending.txt >/dev/null 2>&1 || true
sleep 4
"$VENV/bin/python" deploy/dashboards/check_live.py "http://127.0.0.1:$prom_port"
echo "deploy checks passed"
