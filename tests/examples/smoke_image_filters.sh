#!/usr/bin/env bash
# Smoke run of image_filters (ctest: examples.image_filters_...): the grid
# PNG decodes and has the size the layout implies. The built-in image is
# 240x320 (H x W); tiles are separated and framed by a 4-pixel gap; a row
# holds the input and the seed's five kernels (blur, sharpen, edge, top
# Sobel, emboss):
#   --mode both:                2 rows x 6 columns: 2*240 + 3*4 = 492 high, 6*320 + 7*4 = 1948 wide
#   --mode gray --seed-list:    1 row x 5 columns (blur dropped): 240 + 2*4 = 248, 5*320 + 6*4 = 1624
#   --max-side 80 --mode rgb:   the image shrunk to 60x80: 60 + 8 = 68, 6*80 + 7*4 = 508
# Usage: smoke_image_filters.sh <image_filters> <png_info> <work dir>
set -u
prog=$1 png_info=$2 work=$3
. "$(dirname "$0")/smoke_lib.sh"
rm -rf "$work" && mkdir -p "$work"

check() {  # check <name> <width> <height> [image_filters args...]
  local name=$1 w=$2 h=$3
  shift 3
  local png=$work/$name.png
  run "$work/$name.log" "$prog" --output "$png" "$@" || fail "image_filters $* exited with $?"
  need "$work/$name.log" "^wrote $png \\(${h}x${w}\\)" "the report of the grid's size"
  local info
  info=$("$png_info" "$png") || fail "$png does not decode: $info"
  echo "$png: $info (width height channels mean)"
  set -- $info
  [ "$1 $2 $3" = "$w $h 3" ] || fail "$png is $1x$2 with $3 channels, expected ${w}x${h} RGB"
  # Not one flat colour: the tiles show the image and its filtered maps.
  awk -v m="$4" 'BEGIN { exit !(m > 5 && m < 250) }' || fail "$png's mean byte $4 looks blank"
}
check both 1948 492 --mode both
check gray 1624 248 --mode gray --seed-list
check small 508 68 --mode rgb --max-side 80
echo "PASS: the three grids decode with the sizes the layout implies"
