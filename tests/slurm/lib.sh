# Shared helpers of the tests in tests/slurm and tests/e2e (sourced, not run).
# Needs HLP_SOURCE_DIR and HLP_BIN_DIR (set by ctest).
: "${HLP_SOURCE_DIR:?set by ctest}" "${HLP_BIN_DIR:?set by ctest}"
CLUSTER="$HLP_SOURCE_DIR/slurm/local-cluster.sh"
SKIP=77   # ctest SKIP_RETURN_CODE

say() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%T)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }

# A directory holding the hlp-train and hlp-analyze STAND-INS (sweep-mechanics tests only).
make_standin_bin() {
  local dir=$1
  mkdir -p "$dir"
  ln -sf "${HLP_STANDIN_TRAIN:?path of the hlp-train stand-in}" "$dir/hlp-train"
  cp "$HLP_SOURCE_DIR/tests/slurm/standin/hlp-analyze" "$dir/hlp-analyze"
}

# h5_int_attr FILE NAME -> integer value of a root attribute (empty if missing)
h5_int_attr() {
  h5dump -a "$2" "$1" 2>/dev/null | grep -o '(0): *-\?[0-9]*' | head -n1 | sed 's/(0): *//'
}

# Brings the local Slurm up for this test and always takes it down at exit (unless it was
# already up before the test: then it is left as it was). Tests on one machine share
# /etc/slurm, so a lock serialises them across build directories.
cluster_session() {
  if [ "$(id -u)" -ne 0 ]; then say "SKIP: the local Slurm cluster needs root"; exit $SKIP; fi
  for t in slurmctld slurmd munged sbatch; do
    command -v "$t" >/dev/null || PATH="/usr/sbin:$PATH" command -v "$t" >/dev/null ||
      { say "SKIP: '$t' not installed (apt-get install slurm-wlm munge)"; exit $SKIP; }
  done
  exec 9>/tmp/hlp-local-cluster.lock
  flock -w 900 9 || fail "another test held the local cluster lock for 15 minutes"
  CLUSTER_WAS_UP=0
  if bash "$CLUSTER" status >/dev/null 2>&1; then CLUSTER_WAS_UP=1; fi
  trap cluster_teardown EXIT
  bash "$CLUSTER" up || fail "local-cluster.sh up failed"
}
cluster_teardown() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then bash "$CLUSTER" status >&2 || true; bash "$CLUSTER" logs || true; fi
  if [ "$CLUSTER_WAS_UP" = 0 ]; then bash "$CLUSTER" down || true; fi
  exit "$rc"
}

# job ids from hlp-sweep's submitted.txt: "array <script> <id>" / "analysis <script> <id>"
submitted_ids() { awk -v k="$2" '$1 == k {print $3}' "$1/submitted.txt" | paste -sd, -; }
