# Turns a file into a C source holding it as a NUL-terminated char array.
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
file(WRITE "${OUT}" "/* generated from ${IN}: do not edit */\nconst char ${NAME}[] = {${body}0x00};\nconst unsigned long ${NAME}_len = ${bytes};\n")
