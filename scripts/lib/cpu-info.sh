#!/usr/bin/env bash
# cpu-info.sh: one line naming this machine's CPU for benchmark records. "AMD EPYC" alone does
# not say whether the cores have AVX-512 (Zen 4) or not (Zen 3), and the step time depends on it.
set -euo pipefail
field() { lscpu 2>/dev/null | sed -n "s/^$1:[[:space:]]*//p" | head -1; }
avx512=no
grep -qw avx512f /proc/cpuinfo && avx512=yes
echo "cpu: $(field 'Model name') (family $(field 'CPU family'), model $(field 'Model')), $(nproc) cores, AVX-512: $avx512, L2 $(field 'L2 cache')"
