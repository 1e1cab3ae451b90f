#!/bin/sh
# Prints the Debian version of this checkout: a tag v1.2.3 gives 1.2.3, three
# commits after it 1.2.3+git3.gabc1234; with no tag 0.0.0~gitYYYYMMDD.gabc1234
# (the commit date), which sorts before any tagged release.
set -eu
if v=$(git describe --tags --match 'v[0-9]*' 2>/dev/null); then
	echo "${v#v}" | sed 's/-\([0-9][0-9]*\)-g\([0-9a-f]*\)$/+git\1.g\2/'
else
	echo "0.0.0~git$(git log -1 --format=%cd --date=format:%Y%m%d).g$(git rev-parse --short HEAD)"
fi
