# Sourced by tools/test.sh and the stage scripts of tools/ci: `run_timed NAME COMMAND...` runs
# one named step and times it. TIMED_REPORT collects one "NAME pass|FAIL (rc) in N s" line per
# step; TIMED_STATUS is the exit status of the first step that failed (0: none did). A failing
# step does not stop the caller: every step runs.
TIMED_STATUS=0
TIMED_REPORT=()
run_timed() {
  local name=$1 t0=$SECONDS rc
  shift
  "$@"
  rc=$?
  TIMED_REPORT+=("$(printf '%-30s %s in %4d s' "$name" "$([ $rc = 0 ] && echo pass || echo "FAIL ($rc)")" $((SECONDS - t0)))")
  [ $rc = 0 ] || [ "$TIMED_STATUS" != 0 ] || TIMED_STATUS=$rc
  return $rc
}
