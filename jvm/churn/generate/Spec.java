package churn.generate;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import java.io.IOException;
import java.io.Serializable;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * The generator's arguments as jobs/stages/generate.py passes them (one JSON option): seed, size, dates, b0, the
 * defect rates, and the data contract's vocabularies (jobs/lake/contract.py: columns, categories and their known
 * spellings, required fields, defect kinds), so that the contract stays defined in one place. The latent
 * model's own numbers are in Model (docs/data.md describes them).
 */
final class Spec implements Serializable {
    private static final long serialVersionUID = 1L;

    final String mode;
    final long seed;
    final long customers;
    final int files;
    final long count;
    final int partitions;
    final boolean hasB0;
    final double b0;
    final int cutoffDay, asOfDay, labelWindow;
    final Map<String, String[]> categories = new HashMap<>();
    final String[] streets, streetTypes, supportNotes;
    final Map<String, double[]> rates = new HashMap<>();       // per dataset, in the contract's order of kinds
    final Map<String, String[]> rateKinds = new HashMap<>();
    final Map<String, Integer> code = new HashMap<>();
    final java.util.Set<String> rejecting = new java.util.HashSet<>();   // kinds whose row clean quarantines
    final Map<String, String[]> columns = new HashMap<>();
    final Map<String, String[]> required = new HashMap<>();
    final String[] customerCats, eventCats;
    final Map<String, String> unknown = new HashMap<>();
    final Map<String, String> spelling = new HashMap<>();

    static Spec parse(String json) {
        try {
            return new Spec(new ObjectMapper().readTree(json));
        } catch (IOException e) {
            throw new IllegalArgumentException("generator spec is not JSON: " + e.getMessage(), e);
        }
    }

    private Spec(JsonNode j) {
        mode = j.get("mode").asText();
        seed = j.get("seed").asLong();
        customers = j.get("customers").asLong();
        files = j.get("files").asInt();
        count = j.get("count").asLong();
        partitions = j.get("partitions").asInt();
        hasB0 = !j.get("b0").isNull();
        b0 = hasB0 ? j.get("b0").asDouble() : 0.0;
        cutoffDay = j.get("cutoff_day").asInt();
        asOfDay = j.get("as_of_day").asInt();
        labelWindow = j.get("label_window").asInt();
        fill(j.get("categories"), categories);
        streets = strings(j.get("streets"));
        streetTypes = strings(j.get("street_types"));
        supportNotes = strings(j.get("support_notes"));
        for (Iterator<Map.Entry<String, JsonNode>> it = j.get("rates").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            JsonNode list = e.getValue();
            String[] kinds = new String[list.size()];
            double[] r = new double[list.size()];
            for (int i = 0; i < list.size(); i++) {
                kinds[i] = list.get(i).get(0).asText();
                r[i] = list.get(i).get(1).asDouble();
            }
            rateKinds.put(e.getKey(), kinds);
            rates.put(e.getKey(), r);
        }
        for (Iterator<Map.Entry<String, JsonNode>> it = j.get("codes").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            code.put(e.getKey(), e.getValue().asInt());
        }
        for (JsonNode k : j.get("rejecting")) rejecting.add(k.asText());
        fill(j.get("columns"), columns);
        fill(j.get("required"), required);
        customerCats = strings(j.get("customer_cats"));
        eventCats = strings(j.get("event_cats"));
        for (Iterator<Map.Entry<String, JsonNode>> it = j.get("unknown").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            unknown.put(e.getKey(), e.getValue().asText());
        }
        for (Iterator<Map.Entry<String, JsonNode>> it = j.get("spelling").fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            spelling.put(e.getKey(), e.getValue().asText());
        }
    }

    double rate(String dataset, String kind) {
        String[] kinds = rateKinds.get(dataset);
        for (int i = 0; i < kinds.length; i++) if (kinds[i].equals(kind)) return rates.get(dataset)[i];
        return 0.0;
    }

    int code(String kind) {
        return code.get(kind);
    }

    private static void fill(JsonNode obj, Map<String, String[]> into) {
        for (Iterator<Map.Entry<String, JsonNode>> it = obj.fields(); it.hasNext(); ) {
            Map.Entry<String, JsonNode> e = it.next();
            into.put(e.getKey(), strings(e.getValue()));
        }
    }

    private static String[] strings(JsonNode a) {
        String[] s = new String[a.size()];
        for (int i = 0; i < s.length; i++) s[i] = a.get(i).asText();
        return s;
    }

    private static double[] doubles(JsonNode a) {
        double[] d = new double[a.size()];
        for (int i = 0; i < d.length; i++) d[i] = a.get(i).asDouble();
        return d;
    }
}
