# bench/plots.gp: the PNG plots of bench/run.sh, from the CSV files that
# dlock_bench writes.  Run as: gnuplot -e "dir='bench/results'" bench/plots.gp
#
#   pairs.png         measurement 1: pairs/s by method and client count
#   hot.png           measurement 2: acquisitions/s of one hot resource
#   hot_wait_cdf.png  measurement 2: distribution of the contenders' waits
#   release_cdf.png   measurement 3: release -> waiter latency distribution
#   takeover_cdf.png  measurement 4: lateness of takeover after expiry

if (!exists("dir")) dir = "bench/results"
set datafile separator ","
set datafile missing "NaN"
set terminal pngcairo size 900,540 noenhanced font ",10"
set grid ytics
set key top left

# 1. uncontended pairs
set output dir."/pairs.png"
set title "Uncontended lock+unlock pairs per second (own resource per client)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "pairs/s (log scale)"
set xlabel "clients"
plot dir."/pairs_table.csv" using 2:xtic(1) title columnhead, \
     "" using 3 title columnhead, \
     "" using 4 title columnhead, \
     "" using 5 title columnhead

# 2. hot resource throughput
set output dir."/hot.png"
set title "One hot resource: acquisitions per second (50 us critical section)"
set xlabel "contenders"
set ylabel "acquisitions/s (log scale)"
plot dir."/hot_table.csv" using 2:xtic(1) title columnhead, \
     "" using 3 title columnhead
unset logscale y
unset style data

# helpers for the distributions in samples.csv (test,method,clients,value)
sel(t, m, c) = (strcol(1) eq t && strcol(2) eq m && (c == 0 || $3 == c)) ? $4 : 1/0
set style data lines
set ylabel "fraction of samples"
set yrange [0:1]
set key bottom right

# 2. hot resource waits
set output dir."/hot_wait_cdf.png"
set title "One hot resource: wait for the lock (CDF)"
set logscale x
set xlabel "wait (us, log scale)"
plot dir."/samples.csv" every ::1 using (sel("hot_wait_us", "dlock", 8)):(1) smooth cnormal lw 2 title "dlock, 8", \
     "" every ::1 using (sel("hot_wait_us", "advisory", 8)):(1) smooth cnormal lw 2 title "advisory, 8", \
     "" every ::1 using (sel("hot_wait_us", "dlock", 32)):(1) smooth cnormal lw 2 title "dlock, 32", \
     "" every ::1 using (sel("hot_wait_us", "advisory", 32)):(1) smooth cnormal lw 2 title "advisory, 32"

# 3. release -> waiter
set output dir."/release_cdf.png"
set title "Release -> waiter holds it (CDF)"
set xlabel "latency (us, log scale)"
plot dir."/samples.csv" every ::1 using (sel("release_to_waiter_us", "dlock", 0)):(1) smooth cnormal lw 2 title "dlock", \
     "" every ::1 using (sel("release_to_waiter_us", "advisory", 0)):(1) smooth cnormal lw 2 title "advisory"
unset logscale x

# 4. takeover after expiry
set output dir."/takeover_cdf.png"
set title "Takeover after a 200 ms lease expires: waiter's lock() return - expires_at (CDF)"
set xlabel "late (ms, server clock)"
plot dir."/samples.csv" every ::1 using (sel("takeover_late_ms", "dlock", 0)):(1) smooth cnormal lw 2 title "dlock"
