# Sourced by the reliability scripts that run under rgpu-netem
# (outage_netem.sh, migrate_netem.sh) after they set name, bin and prog:
# skips (exit 77) without root, /dev/net/tun or rgpu-netem, makes $work
# (removed at exit) and in it a certificate for the server namespace's
# address, 10.77.0.2 ($work/cert.pem, $work/key.pem; --gen-cert covers only
# localhost and 127.0.0.1).
if [ "$(id -u)" != 0 ] || [ ! -c /dev/net/tun ]; then
  echo "$name: needs root and /dev/net/tun: skipped"; exit 77
fi
[ -x "$bin/rgpu-netem" ] || { echo "$name: $bin/rgpu-netem not built: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=10.77.0.2 \
  -addext subjectAltName=IP:10.77.0.2 -keyout "$work/key.pem" -out "$work/cert.pem" >/dev/null 2>&1 ||
  { echo "$name: openssl cannot make a certificate"; exit 1; }
