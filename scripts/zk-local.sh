#!/usr/bin/env bash
# A throw-away standalone ZooKeeper server for the tests of membership = zookeeper.
#   scripts/zk-local.sh start DIR   starts one with its data in DIR, on a free port; prints
#                                   host:port (export it as REMORA_TEST_ZK_HOSTS); exit 77
#                                   when no ZooKeeper server is installed (Debian: zookeeperd)
#   scripts/zk-local.sh stop DIR    stops it (the pid is in DIR/pid)
# tickTime is 100 ms, so sessions may be as short as 200 ms (lease_ms; docs/cluster.md).
set -euo pipefail
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

if [ "$cmd" = stop ]; then
	[ -f "$dir/pid" ] && kill "$(cat "$dir/pid")" 2>/dev/null || true
	rm -f "$dir/pid"
	exit 0
fi
[ "$cmd" = start ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }

jar=/usr/share/java/zookeeper.jar
if ! command -v java >/dev/null || [ ! -f "$jar" ]; then
	echo "zk-local: no ZooKeeper server installed (Debian: apt-get install zookeeperd)" >&2
	exit 77
fi
mkdir -p "$dir/data"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$dir/zoo.cfg" <<CFG
tickTime=100
minSessionTimeout=200
maxSessionTimeout=60000
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok
CFG
cp=/etc/zookeeper/conf:$(ls /usr/share/java/*.jar | tr '\n' ':')
java -Xmx128m -cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" \
	>"$dir/log" 2>&1 &
echo $! > "$dir/pid"
for _ in $(seq 100); do
	if reply=$(timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; echo ruok >&3; cat <&3" \
		2>/dev/null) && [ "$reply" = imok ]; then
		echo "127.0.0.1:$port"
		exit 0
	fi
	sleep 0.2
done
echo "zk-local: the server did not answer within 20 s; its log: $dir/log" >&2
"$0" stop "$dir"
exit 1
