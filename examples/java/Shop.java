// A shop's purchases through pgJDBC and a HikariCP pool, as docs/CLIENTS.md
// explains: after any error or timeout of seckill_buy(), the purchase may have
// been made, so the shop asks seckill_order() for its fate and never buys
// again blindly.
//
//   javac -cp postgresql.jar:HikariCP.jar -d classes Shop.java
//   DATABASE_URL=postgresql://... java -cp classes:postgresql.jar:HikariCP.jar:slf4j-api.jar Shop GOODS FIRST LAST
//
// buys for users user-FIRST .. user-LAST on 16 connections, and prints one line
// per user: "user status order_id how", how being "answer" (seckill_buy said
// so) or "asked:SQLSTATE" (its call failed with SQLSTATE, seckill_order told).
// The jars are Debian's, in /usr/share/java (libpostgresql-jdbc-java,
// libhikaricp-java, libslf4j-java); slf4j-simple.jar on the class path shows
// HikariCP's log on stderr.
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public final class Shop {
    // status is final unless the call failed; orderId is null when there is
    // no order
    record Outcome(String status, Long orderId, String how) {}

    private final HikariDataSource pool;

    Shop(HikariDataSource pool) {
        this.pool = pool;
    }

    // What a Spring Boot application sets as spring.datasource.url, .username,
    // .password and spring.datasource.hikari.*.
    static HikariDataSource pool(String databaseUrl) {
        URI url = URI.create(databaseUrl);
        HikariConfig config = new HikariConfig();
        config.setPoolName("shop");
        config.setJdbcUrl("jdbc:postgresql://" + url.getRawAuthority().replaceFirst("^.*@", "")
                + url.getRawPath() + (url.getRawQuery() == null ? "" : "?" + url.getRawQuery()));
        if (url.getRawUserInfo() != null) {
            String[] user = url.getRawUserInfo().split(":", 2);
            config.setUsername(URLDecoder.decode(user[0], StandardCharsets.UTF_8));
            if (user.length > 1)
                config.setPassword(URLDecoder.decode(user[1], StandardCharsets.UTF_8));
        }
        config.setMaximumPoolSize(16);
        // seckill_buy in autocommit: a transaction around it would not undo it
        config.setAutoCommit(true);
        // The server bounds each call's wait, from the connection's startup.
        // No socketTimeout: it gives up on the client side without cancelling
        // the call, which then completes unseen.
        config.addDataSourceProperty("options", "-c seckill.request_timeout=2s");
        return new HikariDataSource(config);
    }

    // The fate of a purchase whose call failed: seckill_order() waits until the
    // worker has settled every earlier request, so its answer is final.  It can
    // fail too (Redis or the worker still away): ask again, a little later.
    Outcome fateOf(String user, String goods, String how) throws SQLException, InterruptedException {
        for (int attempt = 1; ; attempt++) {
            try (Connection conn = pool.getConnection();
                 PreparedStatement st = conn.prepareStatement(
                         "SELECT status, order_id FROM seckill_order(?, ?)")) {
                st.setString(1, user);
                st.setString(2, goods);
                return outcome(st, how);
            } catch (SQLException e) {
                if (attempt == 10)
                    throw e;
                Thread.sleep(200L * attempt);
            }
        }
    }

    Outcome buy(String user, String goods) throws SQLException, InterruptedException {
        try (Connection conn = pool.getConnection();
             PreparedStatement st = conn.prepareStatement(
                     "SELECT status, order_id FROM seckill_buy(?, ?)")) {
            st.setString(1, user);
            st.setString(2, goods);
            return outcome(st, "answer");
        } catch (SQLException e) {
            // Any error, the pool's own included: the SQLSTATE says why
            // (docs/CLIENTS.md), and asking is right whatever it is.
            String state = e.getSQLState();
            return fateOf(user, goods, "asked:" + (state == null ? "none" : state));
        }
    }

    private static Outcome outcome(PreparedStatement st, String how) throws SQLException {
        try (ResultSet rs = st.executeQuery()) {
            rs.next();
            // order_id is a bigint: a long, null when there is no order
            long orderId = rs.getLong("order_id");
            return new Outcome(rs.getString("status"), rs.wasNull() ? null : orderId, how);
        }
    }

    public static void main(String[] args) throws Exception {
        String goods = args[0];
        int first = Integer.parseInt(args[1]), last = Integer.parseInt(args[2]);
        ConcurrentLinkedQueue<String> users = new ConcurrentLinkedQueue<>();
        for (int i = first; i <= last; i++)
            users.add("user-" + i);
        try (HikariDataSource pool = pool(System.getenv("DATABASE_URL"))) {
            Shop shop = new Shop(pool);
            ExecutorService threads = Executors.newFixedThreadPool(16);
            List<Future<Void>> workers = new ArrayList<>();
            for (int t = 0; t < 16; t++)
                workers.add(threads.submit(() -> {
                    String user;
                    while ((user = users.poll()) != null) {
                        Outcome r = shop.buy(user, goods);
                        // one println per line: lines of threads do not mix
                        System.out.println(user + " " + r.status() + " "
                                + (r.orderId() == null ? "-" : r.orderId()) + " " + r.how());
                    }
                    return null;
                }));
            // a purchase whose fate stayed unknown fails the run, and stops
            // the other threads
            try {
                for (Future<Void> w : workers)
                    w.get();
            } finally {
                threads.shutdownNow();
            }
        }
    }
}
