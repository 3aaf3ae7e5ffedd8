# Shared by `up` and `down`: where the control plane lives, and how its processes are found.
# Each component's pid is in data/NAME.pid and its output in data/NAME.log; a pid counts as
# ours only while that process still runs our binary, so a reused pid is never signalled.

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${NE_CONTROL_PLANE_DIR:-$root/target/control-plane}
bin=$out/bin
data=$out/data
kubeconfig=$out/kubeconfig
# In the order they start; stopped in reverse.
components=(etcd kube-apiserver kube-controller-manager)

# The pid of a component if it is running, else nothing (and status 1).
pid_of() {
  local name=$1 pid
  [[ -f $data/$name.pid ]] || return 1
  pid=$(<"$data/$name.pid")
  [[ -n $pid && -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "^$bin/$name " || return 1
  echo "$pid"
}

# Stops a component: TERM, then KILL after 15 s.
stop() {
  local name=$1 pid
  pid=$(pid_of "$name") || { rm -f "$data/$name.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 150); do
    [[ -d /proc/$pid ]] || break
    sleep 0.1
  done
  if [[ -d /proc/$pid ]]; then
    echo "control-plane: $name (pid $pid) did not stop on TERM within 15 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$data/$name.pid"
  echo "control-plane: stopped $name (pid $pid)" >&2
}

# The lock both scripts hold while they start or stop anything.
lock() {
  mkdir -p "$out"
  exec 8>"$out/.lock"
  flock 8
}
