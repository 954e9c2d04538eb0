"""C toolchains for targets: discovery of a cross compiler, and qemu-user for running binaries."""
