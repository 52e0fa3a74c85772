import java.io.FileInputStream;
import java.io.IOException;
import java.util.Arrays;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * Kafka Streams' word count: lines from the input topic, split into words, grouped by word
 * (the repartition topic {application.id}-words-repartition) and counted (the state store
 * "counts" and its compacted changelog topic {application.id}-counts-changelog), each
 * new count written to the output topic as word -> count (a Long).
 *
 * Usage: java WordCount streams.properties input-topic output-topic
 *
 * The properties file holds the Streams settings (bootstrap.servers, application.id,
 * processing.guarantee, ...). The application runs until it is killed; it exits 1 if Streams
 * stops on an error, so a test sees the failure rather than a silent hang.
 */
public final class WordCount {
    public static void main(String[] args) throws IOException, InterruptedException {
        if (args.length != 3) {
            System.err.println("usage: WordCount streams.properties input-topic output-topic");
            System.exit(2);
        }
        Properties settings = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            settings.load(in);
        }
        settings.putIfAbsent(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG,
                             Serdes.StringSerde.class.getName());
        settings.putIfAbsent(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG,
                             Serdes.StringSerde.class.getName());

        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(args[1], Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.toLowerCase(Locale.ROOT).split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word, Grouped.with("words", Serdes.String(), Serdes.String()))
            .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
            .toStream()
            .to(args[2], Produced.with(Serdes.String(), Serdes.Long()));

        KafkaStreams streams = new KafkaStreams(builder.build(), settings);
        CountDownLatch failed = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("state " + before + " -> " + now);
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(exception -> {
            exception.printStackTrace();
            return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler
                .StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        streams.start();
        failed.await();
        streams.close();
        System.exit(1);
    }
}
