// A shop's purchases through pgx v4 and its pool, pgxpool, as docs/CLIENTS.md
// explains: after any error or timeout of seckill_buy(), the purchase may have
// been made, so the shop asks seckill_order() for its fate and never buys
// again blindly.
//
//	go build -o shop shop.go
//	DATABASE_URL=postgresql://... ./shop GOODS FIRST LAST
//
// buys for users user-FIRST .. user-LAST on 16 connections, and prints one line
// per user: "user status order_id how", how being "answer" (seckill_buy said
// so) or "asked:SQLSTATE" (its call failed with SQLSTATE, seckill_order told).
// On Debian, Go builds it offline against golang-github-jackc-pgx-v4-dev with
// GOPATH=/usr/share/gocode GO111MODULE=off.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4/pgxpool"
)

type outcome struct {
	status  string
	orderID *int64 // order_id is a bigint, nil when there is no order
	how     string
}

// fateOf returns the fate of a purchase whose call failed: seckill_order()
// waits until the worker has settled every earlier request, so its answer is
// final.  It can fail too (Redis or the worker still away): ask again, a
// little later.
func fateOf(ctx context.Context, pool *pgxpool.Pool, user, goods, how string) (outcome, error) {
	r := outcome{how: how}
	for attempt := 1; ; attempt++ {
		err := pool.QueryRow(ctx, "SELECT status, order_id FROM seckill_order($1, $2)",
			user, goods).Scan(&r.status, &r.orderID)
		if err == nil || attempt == 10 {
			return r, err
		}
		time.Sleep(time.Duration(200*attempt) * time.Millisecond)
	}
}

func buy(ctx context.Context, pool *pgxpool.Pool, user, goods string) (outcome, error) {
	r := outcome{how: "answer"}
	err := pool.QueryRow(ctx, "SELECT status, order_id FROM seckill_buy($1, $2)",
		user, goods).Scan(&r.status, &r.orderID)
	if err == nil {
		return r, nil
	}
	// Any error: a server's carries its SQLSTATE (docs/CLIENTS.md), one of
	// the client's (a lost connection, a context ended) none, and asking is
	// right whatever it is.
	code := "none"
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code = pgErr.Code
	}
	return fateOf(ctx, pool, user, goods, "asked:"+code)
}

func main() {
	goods := os.Args[1]
	first, _ := strconv.Atoi(os.Args[2])
	last, _ := strconv.Atoi(os.Args[3])

	config, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	config.MaxConns = 16
	// The server bounds each call's wait.  A context deadline would work too
	// (pgx cancels the call), but it costs the connection, which pgx closes.
	config.ConnConfig.RuntimeParams["seckill.request_timeout"] = "2s"
	ctx := context.Background()
	pool, err := pgxpool.ConnectConfig(ctx, config)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer pool.Close()

	users := make(chan string)
	go func() {
		for i := first; i <= last; i++ {
			users <- "user-" + strconv.Itoa(i)
		}
		close(users)
	}()
	var printing sync.Mutex
	var workers sync.WaitGroup
	for w := 0; w < 16; w++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for user := range users {
				r, err := buy(ctx, pool, user, goods)
				if err != nil {
					// the purchase's fate stayed unknown
					fmt.Fprintf(os.Stderr, "%s: %v\n", user, err)
					os.Exit(1)
				}
				orderID := "-"
				if r.orderID != nil {
					orderID = strconv.FormatInt(*r.orderID, 10)
				}
				printing.Lock()
				fmt.Printf("%s %s %s %s\n", user, r.status, orderID, r.how)
				printing.Unlock()
			}
		}()
	}
	workers.Wait()
}
