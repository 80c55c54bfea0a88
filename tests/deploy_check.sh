#!/usr/bin/env bash
# The systemd units of deploy/ pass systemd-analyze verify (ExecStart pointed
# at this build's programs), and a broken copy does not (the check can fail).
# deploy/pgbouncer.ini is run for real by tests/pgbouncer_check.sh.
#
#   bash tests/deploy_check.sh BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: deploy_check.sh BUILD_DIR}
for cmd in systemd-analyze; do
	command -v "$cmd" >/dev/null || { echo "deploy_check: $cmd is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/meter-deploy-XXXXXX)
chmod 755 "$work"
cleanup() {
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "deploy_check: $*" >&2; exit 1; }

# ---- systemd units ----
for u in meter-api meter-collector; do
	sed "s#^ExecStart=/usr/local/bin/$u#ExecStart=$build/$u#" "$here/deploy/$u.service" >"$work/$u.service"
	grep -q "^ExecStart=$build/$u\$" "$work/$u.service" || fail "$u.service has no ExecStart of /usr/local/bin/$u"
done
out=$(systemd-analyze verify "$work/meter-api.service" "$work/meter-collector.service" 2>&1) ||
	fail "systemd-analyze verify failed: $out"
[[ -z $out ]] || fail "systemd-analyze verify complains: $out"
grep -q '^Restart=on-failure' "$work/meter-collector.service" || fail "the collector does not restart on failure"
grep -q '^CapabilityBoundingSet=$' "$work/meter-collector.service" || fail "the collector keeps capabilities"
sed 's/^Restart=on-failure/Restart=sometimes/' "$work/meter-api.service" >"$work/broken.service"
out=$(systemd-analyze verify "$work/broken.service" 2>&1 || true)
[[ -n $out ]] || fail "a broken unit passed systemd-analyze verify: the check cannot fail"
echo "deploy_check: systemd units verified"

exit 0
