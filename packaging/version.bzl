"""Reducer's release version: the one place the packages take it from.

REDUCER_VERSION names the Debian package, the client library's file name,
reducer.pc and the CMake package; kReducerVersion (server/version.h) and,
through `pkg-config --modversion reducer`, the Python package's version
read it too. Its major number is the client library's
ABI version, REDUCER_SOVERSION (soname libreducer_client.so.MAJOR): raise
the major whenever a public header changes in a way that breaks binaries
built against the old one (a class layout, a signature, a removed function).
"""

REDUCER_VERSION = "0.1.0"
REDUCER_SOVERSION = REDUCER_VERSION.split(".")[0]
