package redisstore

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore"
)

// A call is one script call's arguments, pooled (issue 17: the keyed write
// path allocated ~57 times). go-redis writes a *string or *int64 argument
// as it writes a string or an int64, and boxing a pointer allocates
// nothing, so every argument is a pointer into the call; the bytes behind
// the strings (the record's key, fingerprints, ids, the encoded answer) are
// appended to the call's scratch buffer. go-redis keeps nothing of a
// command's arguments once Process returns, so a call goes back to the pool
// as soon as its reply is read.
type call struct {
	argv    []any
	argvArr [18]any
	key     string
	strs    [12]string
	ints    [8]int64
	ns, ni  int
	scratch []byte

	// A call may carry its answer in a SET sent just before the script,
	// in the same pipeline (see [Store.CompleteClaim]): the answer's
	// scratch key, the script's KEYS[2], and the SET's arguments.
	key2   string
	val    string
	setArr [5]any
}

// errNoReply is the error of a queued call that had no reply within the
// client's read timeout; like a read timeout, it is a timeout.
var errNoReply = timeoutError("redisstore: Redis did not reply in time")

type timeoutError string

func (e timeoutError) Error() string { return string(e) }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// maxPooledScratch bounds the scratch buffer a pooled call keeps: a call
// that encoded a large answer leaves its buffer to the garbage collector.
const maxPooledScratch = 64 << 10

var callPool = sync.Pool{New: func() any { return new(call) }}

// lua is a script with its EVALSHA digest and its function's name (in
// lib) boxed once.
type lua struct {
	script *redis.Script
	sha    any
	fn     any
	lib    *library
}

// Boxed command names: constants box without allocating, but say so once.
var (
	argEvalSha any = "evalsha"
	argFCall   any = "fcall"
	argOneKey  any = "1"
	argTwoKeys any = "2"
	argSet     any = "set"
	argPX      any = "px"
	// argScratchTTL is the scratch key's lifetime in ms (scratchTTL).
	argScratchTTL any = scratchTTL.Milliseconds()
)

// newCall starts a call on k's record: EVALSHA placeholders, the key, and
// the clock offset (every script's ARGV[1]).
func (s *Store) newCall(k keystore.Key) *call {
	c := callPool.Get().(*call)
	c.ns, c.ni = 0, 0
	c.scratch = c.scratch[:0]
	start := len(c.scratch)
	c.scratch = append(c.scratch, s.prefix...)
	c.scratch = append(c.scratch, '{')
	c.scratch = hex.AppendEncode(c.scratch, k[:])
	c.scratch = append(c.scratch, '}')
	c.key = c.view(start)
	c.argv = append(c.argvArr[:0], argEvalSha, nil, argOneKey, &c.key)
	c.int(s.offset.Load())
	return c
}

// free returns c to the pool.
func (c *call) free() {
	clear(c.argvArr[:])
	clear(c.strs[:])
	clear(c.setArr[:])
	c.key, c.key2, c.val = "", "", ""
	if cap(c.scratch) > maxPooledScratch {
		c.scratch = nil
	}
	callPool.Put(c)
}

// view returns scratch[start:] as a string sharing its bytes. Later appends
// may move scratch, but never change bytes already viewed: a string stays
// valid until the call is freed.
func (c *call) view(start int) string {
	n := len(c.scratch) - start
	if n == 0 {
		return ""
	}
	return unsafe.String(&c.scratch[start], n)
}

// str adds a string argument.
func (c *call) str(s string) {
	c.strs[c.ns] = s
	c.argv = append(c.argv, &c.strs[c.ns])
	c.ns++
}

// bytes adds b as a string argument (copied into scratch).
func (c *call) bytes(b []byte) {
	start := len(c.scratch)
	c.scratch = append(c.scratch, b...)
	c.str(c.view(start))
}

// uint adds v in decimal as a string argument (the scripts compare tokens
// as strings).
func (c *call) uint(v uint64) {
	start := len(c.scratch)
	c.scratch = strconv.AppendUint(c.scratch, v, 10)
	c.str(c.view(start))
}

// int adds an integer argument.
func (c *call) int(v int64) {
	c.ints[c.ni] = v
	c.argv = append(c.argv, &c.ints[c.ni])
	c.ni++
}

// answer adds resp's encoding as a string argument.
func (c *call) answer(resp *keystore.Response) {
	start := len(c.scratch)
	c.scratch = keystore.AppendResponse(c.scratch, resp)
	c.str(c.view(start))
}

// notice adds ctx's folded notice (keystore.FoldedNotice), if it has one,
// as the script's last two arguments (the scripts' notify): its channel and
// k in hex, the payload of [Notices.Publish]. It returns the notice for the
// caller to mark published once the script replied, or nil.
func (c *call) notice(ctx context.Context, k keystore.Key) *keystore.FoldedNotice {
	n := keystore.FoldedNoticeOf(ctx)
	if n == nil || n.Channel == "" {
		return nil
	}
	c.str(n.Channel)
	start := len(c.scratch)
	c.scratch = hex.AppendEncode(c.scratch, k[:])
	c.str(c.view(start))
	return n
}

// op adds a nonce for this call, so that a script run twice by a client
// retry recognises its own first run.
func (c *call) op() { c.opNonce(newOp()) }

// opNonce adds b as the call's op nonce (see op).
func (c *call) opNonce(b [8]byte) { c.bytes(b[:]) }

// newOp returns a new op nonce.
func newOp() (b [8]byte) {
	binary.LittleEndian.PutUint64(b[:], rand.Uint64())
	return b
}

// scratchTTL is how long an answer's scratch key lives if the script that
// moves it never runs (the connection failed between the SET and the
// EVALSHA). The script finds it a round trip later at most (its EVAL after
// a NOSCRIPT), and answers NEED_ANSWER if it is gone.
const scratchTTL = 30 * time.Second

// moved makes c carry resp in a SET of a scratch key (appendScratchKey,
// with op, the call's op nonce) sent before the script ([Store.do]),
// instead of in its arguments: the script's KEYS[2] is the scratch key,
// and the argument that would hold the answer holds head, the length of
// the zeroed placeholder the scratch value starts with, which the script
// overwrites with the record's header. Call it where the answer's
// argument goes.
func (c *call) moved(prefix string, op [8]byte, head int, resp *keystore.Response) {
	start := len(c.scratch)
	c.scratch = appendScratchKey(c.scratch, prefix, c.key, op)
	c.key2 = c.view(start)
	c.argv[2] = argTwoKeys
	c.argv = slices.Insert(c.argv, 4, any(&c.key2))
	c.int(int64(head))
	start = len(c.scratch)
	c.scratch = append(c.scratch, make([]byte, head)...)
	c.scratch = keystore.AppendResponse(c.scratch, resp)
	c.val = c.view(start)
	c.setArr = [5]any{argSet, &c.key2, &c.val, argPX, argScratchTTL}
}

// do runs script with c's arguments (EVALSHA, then EVAL if the server's
// script cache lacks it) and returns the reply.
//
// The call goes through the store's pipeliner unless Options.DirectCalls
// (see [pipeliner]): alone when nothing else is on the wire, else with the
// calls made meanwhile, as the next pipeline. A queued call waits at most
// the client's read timeout (store.redis.timeout), as a call of its own
// does, however many calls are ahead of it when Redis hangs, and never past
// ctx's deadline. A call that stops waiting may still be sent and run (as a
// call whose reply is lost may): its arguments then stay with it, and c is
// left to the garbage collector instead of going back to the pool.
// Otherwise c is freed.
//
// A call that carries its answer in a SET (call.moved) sends the SET and
// the script together, in this order, as one unit: one pipeline alone, or
// two consecutive calls of the pipeliner's next one. The script's EVAL
// after a NOSCRIPT goes alone, the SET having been done, and so does the
// script that runs a call whose function Redis refused (functionRefused):
// such a call takes a round trip or two more (three when the library must
// be loaded first), each bounded by the client's timeouts and all by
// ctx's deadline.
func (s *Store) do(ctx context.Context, script lua, c *call) (any, error) {
	fn := !s.noFunctions.Load()
	if fn {
		c.argv[0], c.argv[1] = argFCall, script.fn
	} else {
		c.argv[0], c.argv[1] = argEvalSha, script.sha
	}
	cmd := redis.NewCmd(ctx, c.argv...)
	cmd.SetFirstKeyPos(3)
	var set redis.Cmder
	if c.key2 != "" {
		set = redis.NewStatusCmd(ctx, c.setArr[:]...)
	}
	if s.pipe != nil {
		if ok, err := s.pipe.process(ctx, set, cmd); !ok {
			return nil, err // c may still be sent: not freed
		}
	} else {
		s.send.process(ctx, set, cmd)
	}
	v, err := cmd.Result()
	if err != nil {
		keys, args := []string{c.key}, c.argv[4:]
		if c.key2 != "" {
			keys, args = append(keys, c.key2), c.argv[5:]
		}
		switch {
		case fn && s.functionRefused(ctx, err, script.lib):
			// Refused before it ran: the script runs instead.
			v, err = script.script.Run(ctx, s.client, keys, args...).Result()
		case !fn && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")):
			v, err = script.script.Eval(ctx, s.client, keys, args...).Result()
		}
	}
	c.free()
	return v, err
}

// functionRefused tells whether err, an FCALL's, means that Redis refused
// the function before running it (see [refusalOf]), so that the call may
// run as a script (EVALSHA) instead, and acts on the cause: it loads the
// library again where it was missing, and turns the store to EVALSHA for
// good where Redis refuses functions.
func (s *Store) functionRefused(ctx context.Context, err error, lib *library) bool {
	switch refusalOf(err) {
	case refusedMissing:
		_ = s.loadLibrary(ctx, lib)
	case refusedForGood:
		s.noFunctions.Store(true)
	case refusedWrites:
	default:
		return false
	}
	return true
}

// A refusal is why Redis refused an FCALL (or a FUNCTION LOAD) before
// running anything.
type refusal int

const (
	notRefused refusal = iota // it ran, or the error is not one of these
	// refusedMissing: "Function not found", the library is missing from
	// the node (a FUNCTION FLUSH or DELETE, a fresh or restarted Redis
	// without persistence, a new Cluster node, a slot migrating to one).
	refusedMissing
	// refusedForGood: FCALL or FUNCTION unknown or unsupported (a Redis
	// before 7.0, a command renamed away, a proxy in front of Redis), or
	// refused to the ACL user (NOPERM naming fcall or function).
	refusedForGood
	// refusedWrites: Redis refuses a function that may write whole, where
	// a script runs until its first write, while it is over maxmemory
	// (OOM), has too few replicas (NOREPLICAS, min-replicas-to-write),
	// cannot persist (MISCONF) or is a read-only replica (READONLY). As a
	// script, the call's reads (a replay, an answer in progress) still
	// work, and a write fails as it always did.
	refusedWrites
)

// refusalOf classifies an FCALL's error (and FUNCTION LOAD's: only
// refusedForGood applies there). Every refusal it names comes before the
// function runs: Redis checks the function, the ACL, and for a function
// that may write the memory, the replicas, the disk and the role, before it
// calls the function; inside a function the same conditions cannot arise
// (they were checked, and nothing else runs meanwhile), and an ACL or
// unknown-command failure there reads "ERR The user executing the script
// can't ..." or "Unknown Redis command called from script". So a call run
// again as a script never ran twice; a script runs twice safely anyway
// (its op nonce).
func refusalOf(err error) refusal {
	switch {
	case err == nil:
		return notRefused
	case redis.HasErrorPrefix(err, "Function not found"):
		return refusedMissing
	case redis.HasErrorPrefix(err, "unknown command"), redis.HasErrorPrefix(err, "unknown subcommand"),
		redis.HasErrorPrefix(err, "unsupported command"),
		redis.HasErrorPrefix(err, "NOPERM") && refusesFunctions(err.Error()):
		return refusedForGood
	case redis.HasErrorPrefix(err, "OOM"), redis.HasErrorPrefix(err, "NOREPLICAS"),
		redis.HasErrorPrefix(err, "MISCONF"), redis.HasErrorPrefix(err, "READONLY"):
		return refusedWrites
	}
	return notRefused
}

// refusesFunctions reports whether a NOPERM message names FCALL or a
// FUNCTION subcommand (not a key or a channel).
func refusesFunctions(msg string) bool {
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function")
}

// A sender sends a call's script alone, or after its SET as one pipeline.
// Its pipelines are pooled: a new one costs four allocations.
type sender struct {
	client redis.UniversalClient
	pipes  sync.Pool // of *redis.Pipeline
}

func newSender(client redis.UniversalClient) *sender {
	return &sender{client: client}
}

// process runs cmd, after set (as one pipeline) if set is not nil. Their
// errors are in them.
func (s *sender) process(ctx context.Context, set, cmd redis.Cmder) {
	if set == nil {
		_ = s.client.Process(ctx, cmd)
		return
	}
	pipe, _ := s.pipes.Get().(*redis.Pipeline)
	if pipe == nil {
		var ok bool
		if pipe, ok = s.client.Pipeline().(*redis.Pipeline); !ok {
			_, _ = s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				return p.BatchProcess(ctx, set, cmd)
			})
			return
		}
	}
	_ = pipe.BatchProcess(ctx, set, cmd)
	_, _ = pipe.Exec(ctx) // empties pipe
	s.pipes.Put(pipe)
}
