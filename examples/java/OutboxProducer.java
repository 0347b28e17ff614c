// OutboxProducer writes a payment row and its outbox event in one JDBC
// transaction, from several threads at once, with nothing but the SQL
// contract of docs/PRODUCERS.md: a plain INSERT of aggregate_type,
// aggregate_id, event_type and payload. The database fills event_id,
// headers and the times, orders the producers of one aggregate and numbers
// its events. One transaction per run rolls back; its event must never be
// delivered.
//
// Build and run with the JDBC drivers of Debian's libmariadb-java and
// libpostgresql-jdbc-java packages:
//
//   javac -d /tmp/outbox-java examples/java/OutboxProducer.java
//   java -cp /tmp/outbox-java:/usr/share/java/mariadb-java-client.jar:/usr/share/java/postgresql.jar \
//       OutboxProducer 'jdbc:mariadb://127.0.0.1:3306/test?user=root' outbox_events payments 8 25 20
//
// Arguments: JDBC URL, outbox table, payments table (created if missing),
// threads, transactions per thread, aggregates. It prints one line per
// outcome ("committed <payment-id> <aggregate>" and "rolled-back
// <payment-id> <aggregate>") and exits non-zero on any error.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public final class OutboxProducer {
    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: OutboxProducer <jdbc-url> <outbox-table> <payments-table> <threads> <tx-per-thread> <aggregates>");
            System.exit(2);
        }
        String url = args[0];
        String outbox = identifier(args[1]);
        String payments = identifier(args[2]);
        int threads = Integer.parseInt(args[3]);
        int perThread = Integer.parseInt(args[4]);
        int aggregates = Integer.parseInt(args[5]);
        boolean postgres = url.startsWith("jdbc:postgresql:");
        // PostgreSQL's JDBC driver sends strings as varchar: the payload
        // column is json, so the statement casts it.
        String json = postgres ? "CAST(? AS json)" : "?";
        String insertPayment = "INSERT INTO " + payments + " (id, aggregate_id, amount) VALUES (?, ?, ?)";
        String insertEvent = "INSERT INTO " + outbox + " (aggregate_type, aggregate_id, event_type, payload) VALUES ('payment', ?, 'PaymentCreated', " + json + ")";

        try (Connection c = DriverManager.getConnection(url); Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS " + payments + " (id VARCHAR(64) PRIMARY KEY, aggregate_id VARCHAR(100) NOT NULL, amount BIGINT NOT NULL)");
        }

        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<?>> done = new ArrayList<>();
        for (int t = 0; t < threads; t++) {
            final int thread = t;
            done.add(pool.submit(() -> {
                try (Connection c = DriverManager.getConnection(url)) {
                    c.setAutoCommit(false);
                    try (PreparedStatement pay = c.prepareStatement(insertPayment);
                         PreparedStatement event = c.prepareStatement(insertEvent)) {
                        for (int i = 0; i < perThread; i++) {
                            String aggregate = "pay-" + ((thread * 7 + i) % aggregates);
                            String paymentId = "p-" + thread + "-" + i;
                            pay.setString(1, paymentId);
                            pay.setString(2, aggregate);
                            pay.setLong(3, 1000L + i);
                            pay.executeUpdate();
                            event.setString(1, aggregate);
                            event.setString(2, "{\"payment\":\"" + paymentId + "\",\"thread\":" + thread + ",\"tx\":" + i + "}");
                            event.executeUpdate();
                            if (thread == 0 && i == 1) { // the one rolled-back transaction of the run
                                c.rollback();
                                emit("rolled-back " + paymentId + " " + aggregate);
                            } else {
                                c.commit();
                                emit("committed " + paymentId + " " + aggregate);
                            }
                        }
                    }
                } catch (SQLException e) {
                    throw new RuntimeException(e);
                }
                return null;
            }));
        }
        pool.shutdown();
        int failed = 0;
        for (Future<?> f : done) {
            try {
                f.get();
            } catch (Exception e) {
                failed++;
                System.err.println("producer failed: " + e.getCause());
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
    }

    // identifier refuses table names that are not plain lower-case SQL
    // identifiers, since they are written into the statements.
    private static String identifier(String name) {
        if (!name.matches("[a-z_][a-z0-9_]*")) {
            throw new IllegalArgumentException("table name " + name + " is not [a-z_][a-z0-9_]*");
        }
        return name;
    }
}
