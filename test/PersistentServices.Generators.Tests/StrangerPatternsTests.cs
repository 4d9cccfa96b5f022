using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>
/// The acceptance program of issue 14: fifteen endpoints a newcomer writes, each with a pattern that replay cannot
/// reproduce, and the four right ways, which must stay silent. The same program is tried in a fresh app on the
/// packed library (docs/diagnostics.md, "Tried on a fresh app").
/// </summary>
public sealed class StrangerPatternsTests
{
    /// <summary>Program.cs as a stranger writes it (top-level statements, minimal APIs, services in the same project).</summary>
    public const string Program = """
        using System.Diagnostics;
        using System.IO;
        using System.Net.Http;
        using System.Security.Cryptography;
        using System.Threading;
        using Microsoft.AspNetCore.Builder;
        using Microsoft.AspNetCore.Routing;
        using Microsoft.Extensions.DependencyInjection;
        using PersistentServices.Nondeterminism;

        var builder = WebApplication.CreateBuilder(args);
        builder.Services.AddPersistentServices(options => options.LogDirectory = "data/log");
        builder.Services.AddSingleton<Counters>();
        builder.Services.AddSingleton<Clock>();
        builder.Services.AddSingleton<Visits>();
        builder.Services.AddSingleton<Totals>();
        builder.Services.AddHttpClient();
        var app = builder.Build();
        app.UsePersistentServices();

        // 1. a static counter
        app.MapPost("/k", [Persistent] () => new { n = ++Plain.Counter });
        // 2. a static list that endpoints add to
        app.MapPost("/list", [Persistent] (string item) => { Plain.Items.Add(item); return Plain.Items.Count; });
        // 3. Interlocked on a static
        app.MapPost("/hits", [Persistent] () => Interlocked.Increment(ref Plain.Hits));
        // 4. a field of a DI singleton mutated by an endpoint
        app.MapPost("/bump", [Persistent] (Counters counters) => counters.Bump());
        // 5. an HttpClient call
        app.MapPost("/call", [Persistent] async (HttpClient http) => await http.GetStringAsync("http://127.0.0.1:9/x"));
        // 6. a file read
        app.MapPost("/file", [Persistent] () => File.ReadAllText("greeting.txt"));
        // 7. the process id
        app.MapPost("/pid", [Persistent] () => Environment.ProcessId);
        // 8. nondeterminism one call deep: the clock of an injected service
        app.MapPost("/now", [Persistent] (Clock clock) => clock.Now());
        // 9. nondeterminism one call deep: a static helper that makes an id
        app.MapPost("/id", [Persistent] () => Ids.Make());
        // 10. nondeterminism two calls deep: an order id from that helper
        app.MapPost("/order", [Persistent] () => Ids.NewOrderId());
        // 11.-15. the five already caught, directly in the endpoint
        app.MapPost("/time", [Persistent] () => DateTime.Now);
        app.MapPost("/guid", [Persistent] () => Guid.NewGuid());
        app.MapPost("/random", [Persistent] () => Random.Shared.Next());
        app.MapPost("/watch", [Persistent] () => Stopwatch.GetTimestamp());
        app.MapPost("/crypto", [Persistent] () => RandomNumberGenerator.GetInt32(100));

        // The right ways: none of these is reported.
        // a. the injected PersistentTimeProvider (and the library's random and id sources)
        app.MapPost("/ok/time", [Persistent] (PersistentTimeProvider time, IPersistentRandom random, IPersistentIdGenerator ids)
            => new { at = time.GetUtcNow(), n = random.Next(10), id = ids.NewGuid() });
        // b. [SessionState] (and [Shared])
        app.MapPost("/ok/session", [Persistent] (Visits visits, Totals totals) => new { visits = visits.Record(), total = totals.Total += 1 });
        // c. locals
        app.MapPost("/ok/locals", [Persistent] (int[] values) =>
        {
            var total = 0;
            var seen = new List<int>();
            foreach (var value in values)
            {
                total += value;
                seen.Add(value);
            }

            return new { total, count = seen.Count };
        });
        // d. constants and pure helpers
        app.MapPost("/ok/pure", [Persistent] (int price) => Pricing.WithTax(price, Pricing.TaxPercent));

        app.Run();

        public static class Plain
        {
            public static long Counter;
            public static long Hits;
            public static readonly List<string> Items = [];
        }

        public sealed class Counters
        {
            private long _count;

            public long Bump() => ++_count;
        }

        public sealed class Clock
        {
            public DateTime Now() => DateTime.UtcNow;
        }

        public static class Ids
        {
            public static string NewOrderId() => "order-" + Make();

            public static Guid Make() => Guid.NewGuid();
        }

        public sealed partial class Visits
        {
            [SessionState] public partial int Count { get; set; }

            public int Record() => ++Count;
        }

        [SharedState]
        public sealed partial class Totals
        {
            [Shared] public partial int Total { get; set; }
        }

        public static class Pricing
        {
            public const int TaxPercent = 20;

            public static int WithTax(int price, int percent) => price + (price * percent / 100);
        }
        """;

    [Fact]
    public async Task Analyze_FifteenStrangerPatterns_ReportsEachAndNoneOfTheRightWays()
    {
        var diagnostics = await TestCompiler.AnalyzeValidApplicationAsync(Program);

        var reported = diagnostics.Select(d => (d.Id, DiagnosticAssert.SpanText(d))).ToList();
        Assert.Equal(
            [
                ("PS0102", "++Plain.Counter"),
                ("PS0102", "Plain.Items.Add(item)"),
                ("PS0102", "ref Plain.Hits"),
                ("PS0102", "counters.Bump()"),
                ("PS0202", "http.GetStringAsync(\"http://127.0.0.1:9/x\")"),
                ("PS0202", "File.ReadAllText(\"greeting.txt\")"),
                ("PS0202", "Environment.ProcessId"),
                ("PS0201", "clock.Now()"),
                ("PS0201", "Ids.Make()"),
                ("PS0201", "Ids.NewOrderId()"),
                ("PS0201", "DateTime.Now"),
                ("PS0201", "Guid.NewGuid()"),
                ("PS0201", "Random.Shared"),
                ("PS0201", "Stopwatch.GetTimestamp()"),
                ("PS0201", "RandomNumberGenerator.GetInt32(100)"),
            ],
            reported);
    }

    [Fact]
    public async Task Analyze_FifteenStrangerPatterns_MessagesNameThePlaceAndTheChain()
    {
        var diagnostics = await TestCompiler.AnalyzeValidApplicationAsync(Program);
        var messages = diagnostics.Select(d => d.GetMessage(System.Globalization.CultureInfo.InvariantCulture)).ToList();

        Assert.Contains(messages, m => m.StartsWith("'Plain.Counter' (a static field) is incremented: it outlives the request", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Plain.Items' (a static field) is changed by List<T>.Add():", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Plain.Hits' (a static field) is passed by ref to Interlocked.Increment():", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump():", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'DateTime.UtcNow' via Clock.Now() is nondeterministic", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Guid.NewGuid()' via Ids.Make() is nondeterministic", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Guid.NewGuid()' via Ids.NewOrderId() → Ids.Make() is nondeterministic", StringComparison.Ordinal));
        Assert.Contains(messages, m => m.StartsWith("'Environment.ProcessId' is a fact of the running process", StringComparison.Ordinal));
        Assert.All(
            diagnostics.Where(d => d.Id == "PS0102"),
            d => Assert.EndsWith("Keep per-session state in a [SessionState] property, and state shared by all sessions in a [Shared] property, a SharedVariable or a SharedMap.", d.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal));
    }
}
