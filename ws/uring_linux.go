//go:build linux

package ws

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A minimal io_uring (Linux 5.4+) for the flusher: one ring per flusher, used only by
// that flusher's goroutine, carrying IORING_OP_SENDMSG requests and nothing else. A
// round's writes are placed as SQEs and submitted, and their completions awaited, in one
// io_uring_enter: one syscall for a fan-out to many sockets instead of one writev each.
//
// Deliberately not used: SQPOLL (a kernel thread spinning on the ring burns a core to save
// the enter), SINGLE_ISSUER and DEFER_TASKRUN (they tie the ring to one OS thread, and a
// goroutine migrates between threads). The layouts below are the kernel's UAPI
// (include/uapi/linux/io_uring.h); x/sys/unix has the syscall numbers but not these.

// ringEntries is the submission queue's size: a round of more sockets is submitted in
// chunks of this many. The completion queue is twice as large (the kernel's default), and
// a chunk never has more than ringEntries completions outstanding, so it cannot overflow.
const ringEntries = 1024

const (
	ioringOpSendmsg = 9 // IORING_OP_SENDMSG

	ioringOffSQRing = 0          // IORING_OFF_SQ_RING
	ioringOffCQRing = 0x8000000  // IORING_OFF_CQ_RING
	ioringOffSQEs   = 0x10000000 // IORING_OFF_SQES

	ioringFeatSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP: SQ and CQ rings share one mapping (5.4)

	ioringEnterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS
)

// ioSQRingOffsets is struct io_sqring_offsets.
type ioSQRingOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// ioCQRingOffsets is struct io_cqring_offsets.
type ioCQRingOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// ioUringParams is struct io_uring_params (120 bytes).
type ioUringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFD uint32
	resv                                                                   [3]uint32
	sqOff                                                                  ioSQRingOffsets
	cqOff                                                                  ioCQRingOffsets
}

// ioUringSQE is struct io_uring_sqe (64 bytes), with the fields SENDMSG uses named.
type ioUringSQE struct {
	opcode   uint8
	flags    uint8
	ioprio   uint16
	fd       int32
	off      uint64
	addr     uint64 // SENDMSG: the struct msghdr
	len      uint32 // SENDMSG: 1 (one msghdr)
	msgFlags uint32
	userData uint64
	_        [3]uint64 // buf_index, personality, file_index, addr3, pad
}

// ioUringCQE is struct io_uring_cqe (16 bytes, no CQE32).
type ioUringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// Compile-time checks of the UAPI sizes.
var (
	_ [120 - unsafe.Sizeof(ioUringParams{})]struct{}
	_ [unsafe.Sizeof(ioUringParams{}) - 120]struct{}
	_ [64 - unsafe.Sizeof(ioUringSQE{})]struct{}
	_ [unsafe.Sizeof(ioUringSQE{}) - 64]struct{}
	_ [16 - unsafe.Sizeof(ioUringCQE{})]struct{}
	_ [unsafe.Sizeof(ioUringCQE{}) - 16]struct{}
)

// ring is one io_uring. The head and tail words live in memory shared with the kernel, so
// every access to those the kernel writes concurrently goes through sync/atomic (Go's
// atomics are sequentially consistent: at least the acquire and release the protocol
// needs). Our tail store publishes SQEs written before it; our load of the kernel's CQ
// tail makes the CQEs it wrote before it visible.
type ring struct {
	fd int

	sqMem, cqMem, sqeMem []byte // the mappings
	single               bool   // IORING_FEAT_SINGLE_MMAP: cqMem is sqMem

	sqHead *uint32 // the kernel's: SQEs it has consumed
	sqTail *uint32 // ours: SQEs published
	sqMask uint32
	sqes   []ioUringSQE

	cqHead *uint32 // ours: CQEs reaped
	cqTail *uint32 // the kernel's: CQEs posted
	cqMask uint32
	cqes   []ioUringCQE

	entries uint32
	tail    uint32 // our copy of *sqTail: only we write it
}

// errRingFull is returned by ring.sendmsg when every SQE is published and unsubmitted.
var errRingFull = errors.New("ws: io_uring submission queue full")

// newRing sets up a ring of (at least) entries SQEs. The error is the kernel's: ENOSYS
// (no io_uring), EPERM (a seccomp filter, kernel.io_uring_disabled), ENOMEM.
func newRing(entries uint32) (*ring, error) {
	var p ioUringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ring{fd: int(fd), entries: p.sqEntries}
	if err := r.mmap(&p); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *ring) mmap(p *ioUringParams) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(ioUringCQE{})))
	r.single = p.features&ioringFeatSingleMmap != 0
	if r.single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	const prot, flags = unix.PROT_READ | unix.PROT_WRITE, unix.MAP_SHARED | unix.MAP_POPULATE
	if r.sqMem, err = unix.Mmap(r.fd, ioringOffSQRing, sqSize, prot, flags); err != nil {
		return fmt.Errorf("io_uring mmap SQ ring: %w", err)
	}
	r.cqMem = r.sqMem
	if !r.single {
		if r.cqMem, err = unix.Mmap(r.fd, ioringOffCQRing, cqSize, prot, flags); err != nil {
			return fmt.Errorf("io_uring mmap CQ ring: %w", err)
		}
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(ioUringSQE{}))
	if r.sqeMem, err = unix.Mmap(r.fd, ioringOffSQEs, sqeSize, prot, flags); err != nil {
		return fmt.Errorf("io_uring mmap SQEs: %w", err)
	}
	r.sqHead = word(r.sqMem, p.sqOff.head)
	r.sqTail = word(r.sqMem, p.sqOff.tail)
	r.sqMask = *word(r.sqMem, p.sqOff.ringMask)
	r.sqes = unsafe.Slice((*ioUringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	// The indirection array maps ring slots to SQEs; slot i always names SQE i, so it is
	// written once here and the SQE array is used as the ring itself.
	array := unsafe.Slice(word(r.sqMem, p.sqOff.array), p.sqEntries)
	for i := range array {
		array[i] = uint32(i)
	}
	r.cqHead = word(r.cqMem, p.cqOff.head)
	r.cqTail = word(r.cqMem, p.cqOff.tail)
	r.cqMask = *word(r.cqMem, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*ioUringCQE)(unsafe.Pointer(&r.cqMem[p.cqOff.cqes])), p.cqEntries)
	r.tail = atomic.LoadUint32(r.sqTail)
	return nil
}

// word is the uint32 at off in a ring mapping.
func word(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }

func (r *ring) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && !r.single {
		_ = unix.Munmap(r.cqMem)
	}
	if r.sqMem != nil {
		_ = unix.Munmap(r.sqMem)
	}
	r.sqMem, r.cqMem, r.sqeMem, r.sqes, r.cqes = nil, nil, nil, nil, nil
	_ = unix.Close(r.fd)
}

// sendmsg places a non-blocking sendmsg of msg on fd, to complete with userData. It is
// not submitted until enter; msg and the buffers it names must stay put until then and
// until its completion is reaped.
func (r *ring) sendmsg(fd int, msg *unix.Msghdr, userData uint64) error {
	if r.tail-atomic.LoadUint32(r.sqHead) >= r.entries {
		return errRingFull
	}
	sqe := &r.sqes[r.tail&r.sqMask]
	*sqe = ioUringSQE{
		opcode: ioringOpSendmsg,
		fd:     int32(fd),
		addr:   uint64(uintptr(unsafe.Pointer(msg))),
		len:    1,
		// MSG_DONTWAIT: a full socket completes at once with -EAGAIN (the kernel then
		// neither waits nor retries: REQ_F_NOWAIT), whatever the descriptor's own flags.
		// MSG_NOSIGNAL (the kernel adds it for SENDMSG anyway): EPIPE, never SIGPIPE.
		msgFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL,
		userData: userData,
	}
	if TestHookURingRefuseSQE != nil && TestHookURingRefuseSQE() {
		sqe.opcode = ioringOpInvalid
	}
	r.tail++
	atomic.StoreUint32(r.sqTail, r.tail) // publishes the SQE written above
	return nil
}

// unsubmitted is how many published SQEs the kernel has not consumed yet.
func (r *ring) unsubmitted() uint32 { return r.tail - atomic.LoadUint32(r.sqHead) }

// discard takes back the published SQEs the kernel has not consumed (only safe while
// no enter runs: only the ring's goroutine enters).
func (r *ring) discard() {
	r.tail = atomic.LoadUint32(r.sqHead)
	atomic.StoreUint32(r.sqTail, r.tail)
}

// enter submits what is published and waits until minComplete completions are posted
// (counting those not reaped yet). It is one io_uring_enter; EINTR, EAGAIN and EBUSY
// are the caller's to retry (after reaping, for EBUSY).
func (r *ring) enter(minComplete uint32) error {
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.unsubmitted()),
		uintptr(minComplete), ioringEnterGetEvents, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// pop takes the oldest completion posted and not yet reaped, if any, and frees its slot.
func (r *ring) pop() (userData uint64, res int32, ok bool) {
	head := *r.cqHead // only we write it
	if head == atomic.LoadUint32(r.cqTail) {
		return 0, 0, false
	}
	cqe := &r.cqes[head&r.cqMask]
	userData, res = cqe.userData, cqe.res
	atomic.StoreUint32(r.cqHead, head+1) // the kernel may reuse the slot once it sees this
	return userData, res, true
}
