#!/bin/sh
# deb-version.sh VERSION: the Debian version of a build, which must start
# with a digit: v1.2.3 gives 1.2.3 (v1.2.3-4-gabc gives 1.2.3~4.gabc,
# sorting before the release), a bare commit c5fde54 gives 0~c5fde54.
v=${1:-dev}
case $v in
v[0-9]*) v=${v#v} && echo "$v" | tr -- '-' '~' | sed 's/~\([0-9]*\)~/~\1./' ;;
*) echo "0~$v" | tr -- '-' '.' ;;
esac
