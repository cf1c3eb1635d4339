#!/usr/bin/env bash
# Installs what building, testing and the lab need on a fresh Debian machine.
# Idempotent: does nothing when everything is present. prometheus is for
# its promtool (the alert rules' unit tests); its service is not wanted.
set -euo pipefail
need=()
for p in systemd-container iproute2 dbus systemd lintian rpm bash-completion prometheus; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The package enables a Prometheus server on :9090; only promtool is used.
  if [[ " ${need[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null
  fi
fi
# Every module's own requirements (go.work lists them; each is also built on
# its own, GOWORK=off, as `make vet` and the packages do).
for dir in $(go list -m -f '{{.Dir}}'); do
  (cd "$dir" && GOWORK=off go mod download)
done
