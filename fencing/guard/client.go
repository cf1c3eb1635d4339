package guard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// ErrUnreachable marks errors where the supervisor could not be asked at all:
// no socket, nobody listening, permission denied, or no answer in time.
// Callers treat it as "refuse": without a supervisor no unit may start.
var ErrUnreachable = errors.New("kha-supervisor is not running or not reachable")

// ServerError is a refusal by the supervisor to answer the request (unknown
// op, bad arguments, caller not root). It is not a guard refusal: those are
// an Answer with Allowed false.
type ServerError struct {
	Op  string
	Msg string
}

func (e *ServerError) Error() string { return e.Msg }

// Ask asks the supervisor listening at path whether unit may start on this
// node. ctx bounds the whole exchange; without a deadline DefaultTimeout
// applies. An error wrapping ErrUnreachable means the supervisor is not
// running or did not answer.
func Ask(ctx context.Context, path, unit string) (Answer, error) {
	var a Answer
	if err := Call(ctx, path, "guard", Args{Unit: unit}, &a); err != nil {
		return Answer{}, err
	}
	return a, nil
}

// Call sends one request for op with args (marshalled to JSON; nil for none)
// and decodes the result into result (unless nil). It is the client side of
// any op added with Server.Handle.
func Call(ctx context.Context, path, op string, args, result any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	req := request{Op: op}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("guard %s: encode arguments: %w", op, err)
		}
		req.Args = b
	}
	line, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("guard %s: encode request: %w", op, err)
	}

	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("%w (socket %s): %w", ErrUnreachable, path, err)
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	// Also honour a cancellation that comes before the deadline.
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	// A server that refuses us may answer before reading; read its answer
	// even when the write failed, and report the write error only if there
	// is none.
	_, werr := c.Write(append(line, '\n'))
	b, err := bufio.NewReader(io.LimitReader(c, 1<<20)).ReadBytes('\n')
	if werr != nil && len(b) == 0 {
		return fmt.Errorf("%w (socket %s): sending request: %w", ErrUnreachable, path, werr)
	}
	if err != nil && !(errors.Is(err, io.EOF) && len(b) > 0) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("%w (socket %s): no answer in time: %w", ErrUnreachable, path, err)
		}
		return fmt.Errorf("%w (socket %s): reading answer: %w", ErrUnreachable, path, err)
	}
	var resp response
	if err := json.Unmarshal(b, &resp); err != nil {
		return fmt.Errorf("guard %s: malformed answer from %s: %w", op, path, err)
	}
	if !resp.OK {
		msg := resp.Error
		if msg == "" {
			msg = "kha-supervisor: request refused without a reason"
		}
		return &ServerError{Op: op, Msg: msg}
	}
	if result != nil {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("guard %s: decode result: %w", op, err)
		}
	}
	return nil
}
