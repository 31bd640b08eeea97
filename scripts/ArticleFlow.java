// The flash-sale design of the article seckill's README compares itself
// with (its section 12.1), written as a Java shop writes it, beside seckill
// called from the same JVM, pool and driver: scripts/bench.sh runs both.
//
//   java -cp classes:postgresql.jar:HikariCP.jar:slf4j-api.jar \
//       ArticleFlow article|seckill GOODS THREADS SECONDS ANSWERS
//
// article: a call by a new user
//   1. SET seckill:bought:GOODS:USER 1 NX EX 86400      taken: "duplicate"
//   2. SET lock:seckill:GOODS TOKEN NX EX 10, waited for up to 3 s as
//      Redisson's tryLock(3, 10, SECONDS) waits: tried again each time a
//      release is published on the lock's channel      not taken: "busy"
//   3. DECR stock:GOODS                                below 0: "sold_out"
//   4. the order put on a queue in this process        "ok"
//   5. the lock released by a Lua compare-and-delete, which publishes
// and 8 consumer threads take the orders off the queue and, in one
// transaction each, decrement article.stock and insert into article.orders.
// seckill: a call by a new user is SELECT status FROM seckill_buy(USER,
// GOODS) on a HikariCP pool of THREADS connections (the article's pool has 8
// more, its consumers').
//
// THREADS threads call for SECONDS seconds; every "ok" is written to the file
// ANSWERS as it is answered (one write a line: a SIGKILL of the JVM loses no
// line of an answer given).  "window" on stderr says the calls have started.
// At the end one line on stdout:
//   calls ok errors p50_ms p99_ms landed_in_window landed refused cpu_s cpu_drained_s
// landed_in_window: orders in PostgreSQL when the calls stopped (seckill:
// every ok); landed: once the queue is drained; refused: orders PostgreSQL
// refused (article); cpu_s: the machine's busy CPU seconds over the window
// (/proc/stat, every core); cpu_drained_s: the same until the queue was
// drained (the cost of every order landed).  The connection is libpq's environment: PGHOST,
// PGPORT, PGUSER, PGDATABASE; Redis is 127.0.0.1:REDIS_PORT.
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

public final class ArticleFlow {
    static final int CONSUMERS = 8;

    // A Redis connection speaking RESP 2: a command, then its reply (a
    // String, a Long, null or a List).  Debian has no Java Redis client.
    static final class Redis implements AutoCloseable {
        private final Socket socket;
        private final OutputStream out;
        private final InputStream in;

        Redis(int port) throws IOException {
            socket = new Socket("127.0.0.1", port);
            socket.setTcpNoDelay(true);
            socket.setSoTimeout(5000);
            out = new BufferedOutputStream(socket.getOutputStream());
            in = new BufferedInputStream(socket.getInputStream());
        }

        // the next reply, or a message of a channel subscribed to
        Object next() throws IOException {
            return reply();
        }

        Object call(String... args) throws IOException {
            StringBuilder b = new StringBuilder().append('*').append(args.length).append("\r\n");
            for (String a : args) {
                byte[] bytes = a.getBytes(StandardCharsets.UTF_8);
                b.append('$').append(bytes.length).append("\r\n").append(a).append("\r\n");
            }
            out.write(b.toString().getBytes(StandardCharsets.UTF_8));
            out.flush();
            return reply();
        }

        private Object reply() throws IOException {
            int type = in.read();
            String line = line();
            switch (type) {
                case '+': return line;
                case '-': throw new IOException("Redis: " + line);
                case ':': return Long.parseLong(line);
                case '$': {
                    int n = Integer.parseInt(line);
                    if (n < 0)
                        return null;
                    byte[] bytes = in.readNBytes(n + 2);
                    return new String(bytes, 0, n, StandardCharsets.UTF_8);
                }
                case '*': {
                    int n = Integer.parseInt(line);
                    if (n < 0)
                        return null;
                    List<Object> items = new ArrayList<>(n);
                    for (int i = 0; i < n; i++)
                        items.add(reply());
                    return items;
                }
                default: throw new IOException("Redis: connection closed or bad reply");
            }
        }

        private String line() throws IOException {
            StringBuilder b = new StringBuilder();
            int c;
            while ((c = in.read()) != '\r') {
                if (c < 0)
                    throw new IOException("Redis: connection closed");
                b.append((char) c);
            }
            in.read();
            return b.toString();
        }

        @Override
        public void close() throws IOException {
            socket.close();
        }
    }

    // The article's release: delete the lock only if it is still ours (and,
    // as Redisson does, tell its waiters).
    static final String UNLOCK = "if redis.call('get', KEYS[1]) == ARGV[1] then "
            + "redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], 0); return 1 else return 0 end";

    record Order(String goods, String user) {}

    final String mode, goods;
    final int port = Integer.parseInt(System.getenv().getOrDefault("REDIS_PORT", "6379"));
    final HikariDataSource pool;
    final LinkedBlockingQueue<Order> queue = new LinkedBlockingQueue<>();
    final AtomicLong landed = new AtomicLong(), refused = new AtomicLong();
    final OutputStream answers;
    // a permit each time the lock's channel says it was released
    final Semaphore released = new Semaphore(0);
    volatile boolean calling = true, consuming = true;

    ArticleFlow(String mode, String goods, int connections, String answers) throws IOException {
        this.mode = mode;
        this.goods = goods;
        this.answers = new FileOutputStream(answers);
        HikariConfig config = new HikariConfig();
        config.setPoolName(mode);
        config.setJdbcUrl("jdbc:postgresql://" + env("PGHOST", "127.0.0.1") + ":" + env("PGPORT", "5432") + "/"
                + env("PGDATABASE", "postgres") + "?ApplicationName=" + mode);
        config.setUsername(env("PGUSER", "postgres"));
        config.setMaximumPoolSize(connections);
        config.setMinimumIdle(connections);
        this.pool = new HikariDataSource(config);
    }

    static String env(String name, String otherwise) {
        return System.getenv().getOrDefault(name, otherwise);
    }

    synchronized void answered(String user) throws IOException {
        answers.write((user + "\n").getBytes(StandardCharsets.UTF_8));
    }

    // Redisson's listener: one subscription a JVM to the lock's channel, each
    // release wakes a waiter of this JVM to try again.
    void listen() {
        while (calling) {
            try (Redis sub = new Redis(port)) {
                sub.call("SUBSCRIBE", "lock:seckill:" + goods + ":released");
                while (calling) {
                    try {
                        sub.next();
                        released.release();
                    } catch (SocketTimeoutException quiet) {
                        // no release for 5 s
                    }
                }
            } catch (IOException e) {
                // Redis went away: subscribe again, a moment later
                LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(100));
            }
        }
    }

    // One call of the article's flow, on the thread's own Redis connection.
    String articleCall(Redis r, String user, String token) throws IOException, InterruptedException {
        String bought = "seckill:bought:" + goods + ":" + user, lock = "lock:seckill:" + goods;
        if (!"OK".equals(r.call("SET", bought, "1", "NX", "EX", "86400")))
            return "duplicate";
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
        while (!"OK".equals(r.call("SET", lock, token, "NX", "EX", "10"))) {
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                r.call("DEL", bought);
                return "busy";
            }
            // (a release missed by the listener: the lock's next look is at
            // most 100 ms away)
            released.tryAcquire(Math.min(left, TimeUnit.MILLISECONDS.toNanos(100)), TimeUnit.NANOSECONDS);
        }
        String status = "sold_out";
        try {
            if ((Long) r.call("DECR", "stock:" + goods) >= 0) {
                queue.put(new Order(goods, user));
                status = "ok";
            }
        } finally {
            try {
                r.call("EVAL", UNLOCK, "2", lock, lock + ":released", token);
            } catch (IOException e) {
                // the order is queued: its answer stands, the lock runs out
                if (!status.equals("ok"))
                    throw e;
            }
        }
        return status;
    }

    String seckillCall(String user) throws SQLException {
        try (Connection c = pool.getConnection();
             PreparedStatement st = c.prepareStatement("SELECT status FROM seckill_buy(?, ?)")) {
            st.setString(1, user);
            st.setString(2, goods);
            try (ResultSet rs = st.executeQuery()) {
                rs.next();
                return rs.getString(1);
            }
        }
    }

    // The article's consumer: the stock and the order in one transaction.
    void consume() {
        try (Connection c = pool.getConnection()) {
            c.setAutoCommit(false);
            PreparedStatement take = c.prepareStatement(
                    "UPDATE article.stock SET remaining = remaining - 1 WHERE goods = ? AND remaining > 0");
            PreparedStatement insert = c.prepareStatement("INSERT INTO article.orders (goods, user_id) VALUES (?, ?)");
            while (consuming || !queue.isEmpty()) {
                Order o = queue.poll(100, TimeUnit.MILLISECONDS);
                if (o == null)
                    continue;
                try {
                    take.setString(1, o.goods());
                    insert.setString(1, o.goods());
                    insert.setString(2, o.user());
                    if (take.executeUpdate() == 1 && insert.executeUpdate() == 1) {
                        c.commit();
                        landed.incrementAndGet();
                    } else {
                        c.rollback();
                        refused.incrementAndGet();
                    }
                } catch (SQLException e) {
                    c.rollback();
                    refused.incrementAndGet();
                }
            }
        } catch (SQLException | InterruptedException e) {
            System.err.println("consumer: " + e);
        }
    }

    // The caller threads' loop; returns the latencies of its calls (ns).
    long[] caller(int id, long[] counts) {
        long[] lat = new long[1 << 16];
        int n = 0;
        Redis r = null;
        // (the process id: a shop started again has new buyers too)
        String prefix = mode.charAt(0) + "-" + ProcessHandle.current().pid() + "-" + id + "-";
        for (long seq = 0; calling; seq++) {
            String user = prefix + seq;
            long t0 = System.nanoTime();
            String status;
            try {
                if (mode.equals("article")) {
                    if (r == null)
                        r = new Redis(port);
                    status = articleCall(r, user, id + ":" + seq);
                } else
                    status = seckillCall(user);
                if (status.equals("ok"))
                    answered(user);
            } catch (IOException | SQLException e) {
                status = "error";
                if (r != null)
                    try { r.close(); } catch (IOException ignored) { }
                r = null;
            } catch (InterruptedException e) {
                break;
            }
            if (n == lat.length)
                lat = Arrays.copyOf(lat, n * 2);
            lat[n++] = System.nanoTime() - t0;
            counts[status.equals("ok") ? 1 : status.equals("error") ? 2 : 0]++;
        }
        return Arrays.copyOf(lat, n);
    }

    // The machine's busy time, in seconds over all cores (/proc/stat's cpu
    // line: user, nice, system, irq, softirq; USER_HZ 100).
    static double busySeconds() throws IOException {
        String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
        long busy = 0;
        for (int i : new int[] {1, 2, 3, 6, 7})
            busy += Long.parseLong(f[i]);
        return busy / 100.0;
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0], goods = args[1];
        int threads = Integer.parseInt(args[2]), seconds = Integer.parseInt(args[3]);
        if (!mode.equals("article") && !mode.equals("seckill"))
            throw new IllegalArgumentException("mode: article or seckill, not " + mode);
        ArticleFlow flow = new ArticleFlow(mode, goods, threads + (mode.equals("article") ? CONSUMERS : 0), args[4]);
        // the pool's connections open before the window, as pgbench's do
        List<Connection> warm = new ArrayList<>();
        for (int i = 0; i < flow.pool.getMaximumPoolSize(); i++)
            warm.add(flow.pool.getConnection());
        for (Connection c : warm)
            c.close();
        List<Thread> consumers = new ArrayList<>();
        if (mode.equals("article")) {
            Thread listener = new Thread(flow::listen);
            listener.setDaemon(true);
            listener.start();
            for (int i = 0; i < CONSUMERS; i++) {
                Thread t = new Thread(flow::consume);
                // an error of main's ends the JVM
                t.setDaemon(true);
                t.start();
                consumers.add(t);
            }
        }
        long[][] counts = new long[threads][3];
        long[][] lat = new long[threads][];
        Thread[] callers = new Thread[threads];
        double busy0 = busySeconds();
        System.err.println("window");
        for (int i = 0; i < threads; i++) {
            int id = i;
            callers[i] = new Thread(() -> lat[id] = flow.caller(id, counts[id]));
            callers[i].setDaemon(true);
            callers[i].start();
        }
        Thread.sleep(seconds * 1000L); // the length of the sale, not a wait for a condition
        flow.calling = false;
        long landedInWindow = flow.landed.get();
        double busy = busySeconds() - busy0;
        for (Thread t : callers)
            t.join();
        if (mode.equals("seckill"))
            landedInWindow = flow.landed.addAndGet(Arrays.stream(counts).mapToLong(c -> c[1]).sum());
        flow.consuming = false;
        for (Thread t : consumers)
            t.join();
        double drained = busySeconds() - busy0;
        long[] all = Arrays.stream(lat).flatMapToLong(Arrays::stream).sorted().toArray();
        long ok = 0, errors = 0;
        for (long[] c : counts) {
            ok += c[1];
            errors += c[2];
        }
        System.out.printf("%d %d %d %.3f %.3f %d %d %d %.2f %.2f%n", all.length, ok, errors,
                all.length == 0 ? 0 : all[(all.length - 1) / 2] / 1e6,
                all.length == 0 ? 0 : all[(int) Math.ceil(all.length * 0.99) - 1] / 1e6,
                landedInWindow, flow.landed.get(), flow.refused.get(), busy, drained);
        flow.pool.close();
    }
}
