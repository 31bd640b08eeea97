#!/bin/sh
# Turns each lua/NAME.lua given on the command line into a C string constant
# LUA_NAME, so the scripts ship inside the library exactly as they are in the tree.
echo "/* generated from the Lua scripts by lua/embed.sh; do not edit */"
for f in "$@"; do
	name=$(basename "$f" .lua | tr 'a-z' 'A-Z')
	echo "static const char LUA_${name}[] ="
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/\t"/' -e 's/$/\\n"/' "$f"
	echo ";"
done
