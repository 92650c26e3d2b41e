package bufpool

import (
	"context"
	"testing"
	"time"
)

func TestPool(t *testing.T) {
	p := New(1024)
	b := p.Get()
	if len(*b) != 1024 {
		t.Fatalf("len %d", len(*b))
	}
	p.Put(b)
	allocs := testing.AllocsPerRun(100, func() { p.Put(p.Get()) })
	if allocs != 0 {
		t.Fatalf("Get/Put allocates %v times", allocs)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("wrong-size Put did not panic")
		}
	}()
	small := make([]byte, 10)
	p.Put(&small)
}

func TestSlab(t *testing.T) {
	s, err := NewSlab(make([]byte, 4*100+7), 100)
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 4 || s.Available() != 4 {
		t.Fatalf("len %d avail %d", s.Len(), s.Available())
	}
	var got []int32
	for range 4 {
		i, ok := s.TryGet()
		if !ok {
			t.Fatal("TryGet failed with chunks free")
		}
		if c := s.Chunk(i); len(c) != 100 || cap(c) != 100 || s.Offset(i) != int(i)*100 {
			t.Fatalf("chunk %d: len %d cap %d", i, len(c), cap(c))
		}
		got = append(got, i)
	}
	if _, ok := s.TryGet(); ok {
		t.Fatal("TryGet succeeded on an empty slab")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.Get(ctx); err == nil {
		t.Fatal("Get on an empty slab did not wait for ctx")
	}
	done := make(chan int32)
	go func() {
		i, _ := s.Get(context.Background())
		done <- i
	}()
	s.Put(got[2])
	if i := <-done; i != got[2] {
		t.Fatalf("Get returned %d, want %d", i, got[2])
	}
	s.Put(got[0])
	defer func() {
		if recover() == nil {
			t.Fatal("double Put did not panic")
		}
	}()
	s.Put(got[0])
}
