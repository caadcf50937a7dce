#!/bin/bash
# Tests/Benchmarks/run-submit.sh BINARY trusted|signed INPUT DIR: `init` a fresh store in DIR, then
# `submit` INPUT into it, answers to /dev/null (a whole-process workload for paired timing; docs/benchmarks.md).
set -e
bin=$1; mode=$2; input=$3; dir=$4
rm -rf "$dir"
if [ "$mode" = signed ]; then
  "$bin" init --bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890 --root-certificate "$(dirname "$0")/../AppleSignedDataTests/Vectors/certs/testCA.der" --store "$dir" >/dev/null
  exec "$bin" submit --store "$dir" < "$input" > /dev/null
else
  "$bin" init --bundle-id com.example.myrecipes --environment Production --app-apple-id 1234567890 --store "$dir" >/dev/null
  exec "$bin" submit --trust-decoded --store "$dir" < "$input" > /dev/null
fi
