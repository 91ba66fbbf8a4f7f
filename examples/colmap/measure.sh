#!/bin/sh
# measure.sh: peak resident memory of the COLMAP steps, as written down in
# MEASUREMENTS.md. Usage: examples/colmap/measure.sh [WORKDIR]
# Needs colmap, GNU time (/usr/bin/time) and go. Prints one line per run:
#   step size threads batch peak_rss_KiB wall_s
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
go build -o "$work/genviews" "$here/genviews"

peak() { # peak LABEL CMD...: run CMD under GNU time, print LABEL peak wall
	label=$1
	shift
	/usr/bin/time -f "%M %e" -o "$work/time.out" "$@" >"$work/last.log" 2>&1
	if grep -q "ERROR" "$work/last.log"; then
		echo "measure: $label failed, see $work/last.log" >&2
		exit 1
	fi
	echo "$label $(cat "$work/time.out")"
}

for size in 320x240 640x480; do
	w=${size%x*}
	h=${size#*x}
	d="$work/$size"
	rm -rf "$d"
	"$work/genviews" --n 24 --width "$w" --height "$h" --out "$d"
	for threads in 1 2 4; do
		for batch in 4 12; do
			rm -f "$d/db.db"
			(cd "$d/images" && ls | head -n "$batch") >"$d/list.txt"
			peak "features $size $threads $batch" colmap feature_extractor \
				--database_path "$d/db.db" --image_path "$d/images" \
				--image_list_path "$d/list.txt" --ImageReader.single_camera 1 \
				--SiftExtraction.num_threads "$threads" --SiftExtraction.use_gpu 0
		done
	done
	rm -f "$d/db.db"
	peak "features $size 2 24(all)" colmap feature_extractor \
		--database_path "$d/db.db" --image_path "$d/images" --ImageReader.single_camera 1 \
		--SiftExtraction.num_threads 2 --SiftExtraction.use_gpu 0
	if [ "$size" = 320x240 ]; then
		for threads in 1 2; do
			rm -f "$d/match.db"
			cp "$d/db.db" "$d/match.db"
			peak "matching $size $threads 24" colmap exhaustive_matcher \
				--database_path "$d/match.db" --SiftMatching.num_threads "$threads" --SiftMatching.use_gpu 0
		done
		for threads in 1 2; do
			rm -rf "$d/sparse"
			mkdir -p "$d/sparse"
			peak "mapper $size $threads 24" colmap mapper --database_path "$d/match.db" \
				--image_path "$d/images" --output_path "$d/sparse" --Mapper.num_threads "$threads"
		done
	fi
done
