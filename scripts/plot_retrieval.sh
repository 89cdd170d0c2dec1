#!/usr/bin/env bash
# Draws the recall-against-budget plot of `ucm eval retrieval --csv FILE` with gnuplot
# (Debian's gnuplot-nox): mean recall R on layers >= 2 against the fraction of blocks kept, one
# line per policy, the oracle R* dashed; PSA as points at its own block counts (one per tau).
# Usage: scripts/plot_retrieval.sh RESULTS.csv OUT.png
set -euo pipefail
csv=${1:?usage: plot_retrieval.sh RESULTS.csv OUT.png}
png=${2:?usage: plot_retrieval.sh RESULTS.csv OUT.png}
command -v gnuplot >/dev/null || { echo "plot_retrieval: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Columns: kind,policy,group,budget_or_tau,blocks,recall,oracle,fraction. The x axis is the mean
# fraction of blocks selected (windows included): blocks / n, with n from the oracle rows.
for p in esa quest gsa oracle; do
  awk -F, -v p="$p" '$1=="recall" && $2==p && $3=="layers2+" {print $4, $6}' "$csv" | sort -g >"$tmp/$p.dat"
done
awk -F, '$1=="k_tau" && $2=="psa" && $3=="layers2+" {f[$4]=$8} $1=="recall" && $2=="psa" && $3=="layers2+" {r[$4]=$6}
         END {for (t in r) print f[t], r[t], t}' "$csv" | sort -g >"$tmp/psa.dat"
gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set output "$png"
set title "Attention-mass recall on layers >= 2 (SmolLM2-135M, python3.11-doc)"
set xlabel "fraction of context blocks attended (windows included)"
set ylabel "mean recall R"
set key bottom right
set grid
set yrange [0:1.02]
set logscale x
plot "$tmp/oracle.dat" using 1:2 with linespoints dt 2 lw 2 title "oracle R*", \
     "$tmp/quest.dat" using 1:2 with linespoints lw 2 title "Quest (R1 bound)", \
     "$tmp/esa.dat" using 1:2 with linespoints lw 2 title "ESA (R0 mean key)", \
     "$tmp/gsa.dat" using 1:2 with linespoints lw 2 title "GSA (R4 Hamming)", \
     "$tmp/psa.dat" using 1:2:3 with labels point pt 7 offset 1,-0.8 title "PSA (tau labelled)"
GP
echo "plot_retrieval: wrote $png" >&2
