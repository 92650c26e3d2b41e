package rdmap

import "unsafe"

// sliceRange returns the address range [lo, hi) of b's elements, to tell
// whether a slice lies inside an AllocMemory mapping.
func sliceRange(b []byte) (lo, hi uintptr) {
	lo = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return lo, lo + uintptr(len(b))
}
