package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// SetDelay makes every chunk of bytes reach the other side d after the
// proxy read it, in both directions, as over a slow link (a request and its
// answer take 2d more); zero ends the delay for chunks read from then on.
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Delay is the current delay (see SetDelay).
func (p *Proxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

type chunk struct {
	b   []byte
	due time.Time
}

// delayLine writes chunks to dst in order, each no earlier than its due
// time, so a delay does not slow the stream down beyond itself.
type delayLine struct {
	ch   chan chunk
	dead chan struct{} // closed when a write failed
	done chan struct{} // closed when the writer returned
	once sync.Once
}

func newDelayLine(dst, src net.Conn) *delayLine {
	l := &delayLine{ch: make(chan chunk, 256), dead: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for c := range l.ch {
			if w := time.Until(c.due); w > 0 {
				time.Sleep(w)
			}
			if _, err := dst.Write(c.b); err != nil {
				_ = src.Close()
				_ = dst.Close()
				close(l.dead)
				for range l.ch {
				}
				return
			}
		}
	}()
	return l
}

// send queues a copy of b; it reports false once a write has failed.
func (l *delayLine) send(b []byte, due time.Time) bool {
	c := chunk{b: append([]byte(nil), b...), due: due}
	select {
	case l.ch <- c:
		return true
	case <-l.dead:
		return false
	}
}

// close flushes what is queued and waits for the writer.
func (l *delayLine) close() {
	l.once.Do(func() { close(l.ch) })
	<-l.done
}
