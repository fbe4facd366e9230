# launch.sed (cudaemu) - rewrites each CUDA kernel launch of a .cu file into
# C++ that cudaemu's headers run on the CPU (GNU sed, -z -E: the whole file
# is one buffer, so a launch split over lines still matches):
#   name<tmpl><<<grid, block, shmem, stream>>>(args)
#   -> ::emu::launch("name<tmpl>", grid, block, shmem, stream)(name<tmpl>, args)
# The configuration must not contain '>' or ';' (none of ampc's do; one
# that did would fail to compile, not mis-run). Newlines are kept, so
# compiler messages point at the .cu file's own lines (#line in front).
s/([A-Za-z_][A-Za-z0-9_]*(<[^<>;]*>)?)([[:space:]]*)<<<([^>;]*)>>>([[:space:]]*)\(/::emu::launch("\1", \4)\3\5(\1, /g
