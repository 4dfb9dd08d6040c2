#!/usr/bin/env bash
# The Docker daemon the container backend's tests use: Debian's docker.io, started by hand
# (no systemd here). `start` installs what is missing and starts containerd and dockerd unless
# a daemon already answers; `stop` removes what dbaops made (containers, networks), stops the
# daemon this script started and puts back the forwarding policy Docker changed.
set -euo pipefail
state=/run/dbaops-ci-docker
mkdir -p "$state"

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
containerd_answers() {
  timeout 5 ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1
}

start() {
  local need=()
  command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
  if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends "${need[@]}"
  fi
  if answers; then
    echo "docker: a daemon already answers; using it"
    return 0
  fi
  iptables -S FORWARD 2>/dev/null | head -1 | awk '{print $3}' >"$state/forward-policy" || true
  cat /proc/sys/net/ipv4/ip_forward >"$state/ip-forward" 2>/dev/null || true
  # A socket left by a containerd that was killed (an interrupted run) answers nothing:
  # remove it and start a fresh containerd.
  if [ -S /run/containerd/containerd.sock ] && ! containerd_answers; then
    echo "docker: removing a stale containerd socket"
    rm -f /run/containerd/containerd.sock /run/containerd/containerd.sock.ttrpc
  fi
  if [ ! -S /run/containerd/containerd.sock ]; then
    nohup containerd >"$state/containerd.log" 2>&1 &
    echo $! >"$state/containerd.pid"
    for _ in $(seq 1 300); do containerd_answers && break; sleep 0.1; done
    containerd_answers || {
      echo "docker: containerd did not start"; tail -20 "$state/containerd.log"; return 1
    }
  fi
  nohup dockerd --host unix:///var/run/docker.sock \
    --containerd /run/containerd/containerd.sock >"$state/dockerd.log" 2>&1 &
  echo $! >"$state/dockerd.pid"
  for _ in $(seq 1 300); do answers && break; sleep 0.1; done
  answers || { echo "docker: dockerd did not start"; tail -20 "$state/dockerd.log"; return 1; }
  echo "docker: dockerd $(docker version --format '{{.Server.Version}}') started"
}

stop() {
  if answers; then
    ids=$(docker ps -aq --filter label=dbaops.cluster) || true
    [ -n "$ids" ] && docker rm -f $ids >/dev/null || true
    nets=$(docker network ls -q --filter label=dbaops.cluster) || true
    [ -n "$nets" ] && docker network rm $nets >/dev/null || true
  fi
  for name in dockerd containerd; do
    if [ -f "$state/$name.pid" ]; then
      pid=$(cat "$state/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$state/$name.pid"
      if [ "$name" = containerd ] && ! containerd_answers; then
        rm -f /run/containerd/containerd.sock /run/containerd/containerd.sock.ttrpc
      fi
    fi
  done
  if [ -f "$state/forward-policy" ] && [ -s "$state/forward-policy" ]; then
    iptables -P FORWARD "$(cat "$state/forward-policy")" 2>/dev/null || true
    rm -f "$state/forward-policy"
  fi
  if [ -f "$state/ip-forward" ]; then
    cat "$state/ip-forward" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
    rm -f "$state/ip-forward"
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
