# Sourced (POSIX sh, so make's recipes can use it too): `step NAME` prints `ci-step NAME SECONDS cpu-busy=… cpu-stolen=…` for the time
# since the previous step (or since sourcing). A slow run then shows where its time went,
# with the CPU the whole machine spent meanwhile (busy, and stolen by the hypervisor, in
# core-seconds from /proc/stat): on two shared cores a step's wall time says little without
# them, and machines of one kind differ in speed from day to day.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $9}' /proc/stat; }
ticks=$(getconf CLK_TCK)
now() { cut -d. -f1 /proc/uptime; }
step_start=$(now)
busy_start=$(cpu_ticks | cut -d' ' -f1)
steal_start=$(cpu_ticks | cut -d' ' -f2)
step() {
  step_now=$(now) step_ticks=$(cpu_ticks)
  step_busy=${step_ticks% *} step_steal=${step_ticks#* }
  echo "ci-step $1 $((step_now - step_start))s" \
    "cpu-busy=$(((step_busy - busy_start) / ticks))s" \
    "cpu-stolen=$(((step_steal - steal_start) / ticks))s"
  step_start=$step_now busy_start=$step_busy steal_start=$step_steal
}
