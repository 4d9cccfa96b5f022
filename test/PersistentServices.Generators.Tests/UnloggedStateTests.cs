using Microsoft.CodeAnalysis;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>PS0102: persistent code writes memory that outlives the request and is not logged.</summary>
public sealed class UnloggedStateTests
{
    private const string Usings = """
        using System.Collections.Concurrent;
        using System.Threading;
        using Microsoft.AspNetCore.Builder;
        using Microsoft.AspNetCore.Routing;
        using Microsoft.Extensions.DependencyInjection;
        using Microsoft.Extensions.DependencyInjection.Extensions;
        using PersistentServices.SharedState;

        namespace App;

        public static class Plain
        {
            public static long Counter;
            public static int A, B, Parsed;
            public static string? Name;
            public static int Prop { get; set; }
            public static readonly List<string> Items = [];
            public static readonly Dictionary<string, int> Map = [];
            public static readonly ConcurrentDictionary<string, int> Cache = new();
            public static readonly int[] Slots = new int[4];
            public static readonly HashSet<int> Seen = [];
            public static readonly Queue<int> Pending = new();
            public static readonly ImmutableList<int>.Builder Builder = ImmutableList.CreateBuilder<int>();
            public static readonly ImmutableList<string> Names = [];
            public static readonly object Gate = new();
            public static readonly Box Held = new();
            public static readonly AsyncLocal<int> Ambient = new();
            public static readonly SharedVariable<long> Tickets = new("App.Tickets");
            public static readonly SharedMap<string, int> Stock = new("App.Stock");

            public static void Bump() => Counter++;
        }

        public sealed class Box
        {
            private int _n;

            public int Value;

            public int Increment() => ++_n;
        }

        """;

    public static TheoryData<string, string, string> Reported => new()
    {
        { "[Persistent] public long M() => ++Plain.Counter;", "++Plain.Counter", "'Plain.Counter' (a static field) is incremented" },
        { "[Persistent] public long M() => Plain.Counter--;", "Plain.Counter--", "'Plain.Counter' (a static field) is decremented" },
        { "[Persistent] public void M() => Plain.Counter = 5;", "Plain.Counter = 5", "'Plain.Counter' (a static field) is assigned" },
        { "[Persistent] public void M() => Plain.Counter += 2;", "Plain.Counter += 2", "'Plain.Counter' (a static field) is changed by '+='" },
        { "[Persistent] public void M() => Plain.Name ??= \"x\";", "Plain.Name ??= \"x\"", "'Plain.Name' (a static field) is assigned by '??='" },
        { "[Persistent] public void M() => Plain.Prop = 1;", "Plain.Prop = 1", "'Plain.Prop' (a static property) is assigned" },
        { "[Persistent] public void M() => Plain.Items.Add(\"x\");", "Plain.Items.Add(\"x\")", "'Plain.Items' (a static field) is changed by List<T>.Add()" },
        { "[Persistent] public void M() => Plain.Items.Clear();", "Plain.Items.Clear()", "'Plain.Items' (a static field) is changed by List<T>.Clear()" },
        { "[Persistent] public void M() => Plain.Map[\"k\"] = 1;", "Plain.Map[\"k\"] = 1", "'Plain.Map' (a static field) is changed (an element assigned)" },
        { "[Persistent] public void M() => Plain.Slots[0]++;", "Plain.Slots[0]++", "'Plain.Slots' (a static field) is changed (an element incremented)" },
        { "[Persistent] public int M() => Plain.Cache.GetOrAdd(\"k\", 1);", "Plain.Cache.GetOrAdd(\"k\", 1)", "'Plain.Cache' (a static field) is changed by ConcurrentDictionary<TKey, TValue>.GetOrAdd()" },
        { "[Persistent] public bool M() => Plain.Seen.Add(1);", "Plain.Seen.Add(1)", "'Plain.Seen' (a static field) is changed by HashSet<T>.Add()" },
        { "[Persistent] public void M() => Plain.Pending.Enqueue(1);", "Plain.Pending.Enqueue(1)", "'Plain.Pending' (a static field) is changed by Queue<T>.Enqueue()" },
        { "[Persistent] public void M() => Plain.Builder.Add(1);", "Plain.Builder.Add(1)", "'Plain.Builder' (a static field) is changed by ImmutableList<T>.Builder.Add()" },
        { "[Persistent] public void M() => Plain.Held.Value = 3;", "Plain.Held.Value = 3", "'Plain.Held' (a static field) is changed ('Value' assigned)" },
        { "[Persistent] public long M() => Interlocked.Exchange(ref Plain.Counter, 0);", "ref Plain.Counter", "'Plain.Counter' (a static field) is passed by ref to Interlocked.Exchange()" },
        { "[Persistent] public void M() => Volatile.Write(ref Plain.Counter, 1);", "ref Plain.Counter", "'Plain.Counter' (a static field) is passed by ref to Volatile.Write()" },
        { "[Persistent] public bool M(string s) => int.TryParse(s, out Plain.Parsed);", "out Plain.Parsed", "'Plain.Parsed' (a static field) is passed by out to Int32.TryParse()" },
        { "[Persistent] public void M() => Plain.Bump();", "Plain.Bump()", "'Plain.Counter' (a static field) is incremented via Plain.Bump()" },
        { "[Persistent] public int M() => Plain.Held.Increment();", "Plain.Held.Increment()", "'Plain.Held' (a static field) is changed ('_n' incremented) via Box.Increment()" },
        { "private static int s_calls; [Persistent] public int M() => ++s_calls;", "++s_calls", "'Orders.s_calls' (a static field) is incremented" },
    };

    [Theory]
    [MemberData(nameof(Reported))]
    public async Task Analyze_WriteToStaticMemory_ReportsPS0102(string member, string spanText, string messageStart)
    {
        var source = Usings + $$"""
            public class Orders
            {
                {{member}}
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0102", spanText);

        Assert.Equal(DiagnosticSeverity.Warning, diagnostic.Severity);
        Assert.StartsWith(messageStart + ": it outlives the request and is not logged", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    public static TheoryData<string, string, string> SingletonRegistrations => new()
    {
        { "services.AddSingleton<Counters>();", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton(typeof(Counters));", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.TryAddSingleton<Counters>();", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton(new Counters());", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton(sp => new Counters());", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddKeyedSingleton<Counters>(\"main\");", "counters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton<ICounters, Counters>();", "icounters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton(typeof(ICounters), typeof(Counters));", "icounters.Bump()", "'Counters._count' (a field of the singleton 'Counters') is incremented via Counters.Bump()" },
        { "services.AddSingleton<Counters>();", "counters.Total++", "'Counters.Total' (a field of the singleton 'Counters') is incremented" },
        { "services.AddSingleton<Counters>();", "counters.Names.Remove(\"x\")", "'Counters.Names' (a field of the singleton 'Counters') is changed by List<T>.Remove()" },
        { "services.AddSingleton<Counters>();", "counters.Last = 1", "'Counters.Last' (a property of the singleton 'Counters') is assigned" },
    };

    [Theory]
    [MemberData(nameof(SingletonRegistrations))]
    public async Task Analyze_WriteToFieldOfSingleton_ReportsPS0102(string registration, string call, string messageStart)
    {
        var source = Usings + $$"""
            public interface ICounters
            {
                long Bump();
            }

            public sealed class Counters : ICounters
            {
                private long _count;

                public long Total;

                public readonly List<string> Names = [];

                public long Last { get; set; }

                public Counters()
                {
                    _count = 0;
                }

                public long Bump() => ++_count;
            }

            public static class Setup
            {
                public static void Register(IServiceCollection services) => {{registration}}
            }

            [Persistent]
            public class Orders
            {
                public object M(Counters counters, ICounters icounters) => {{call}};
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0102", call);

        Assert.StartsWith(messageStart + ":", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_DeconstructionIntoStaticFields_ReportsPS0102ForEachPlace()
    {
        var source = Usings + """
            public class Orders
            {
                [Persistent] public void M() => (Plain.A, Plain.B) = (1, 2);
            }
            """;

        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(source);

        DiagnosticAssert.Ids(diagnostics, "PS0102", "PS0102");
        Assert.Equal(
            ["'Plain.A' (a static field) is assigned", "'Plain.B' (a static field) is assigned"],
            diagnostics.Select(d => d.GetMessage(System.Globalization.CultureInfo.InvariantCulture).Split(':')[0]));
    }

    [Fact]
    public async Task Analyze_FieldOfSharedStateClass_ReportsPS0102()
    {
        var source = Usings + """
            [SharedState]
            public partial class Catalog
            {
                private int _version;

                [Shared] public partial int Count { get; set; }

                public int Publish()
                {
                    Count += 1;
                    return ++_version;
                }
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0102", "++_version");

        Assert.StartsWith("'Catalog._version' (a field of the singleton 'Catalog') is incremented:", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_StaticWriteInASubordinateComponent_ReportsPS0102()
    {
        // [Subordinate] code runs inside its parent's persistent requests: it is persistent code.
        var source = Usings + """
            public static class Stats
            {
                public static int Baskets;
            }

            [Subordinate]
            public sealed class BasketManager
            {
                public void Add() => Stats.Baskets++;
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0102", "Stats.Baskets++");

        Assert.StartsWith("'Stats.Baskets' (a static field) is incremented:", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_LocalCapturedByMinimalApiEndpoint_ReportsPS0102()
    {
        var source = Usings + """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    var count = 0;
                    app.MapPost("/k", [Persistent] () => ++count);
                }
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0102", "++count");

        Assert.StartsWith("'count' (a local variable captured by the endpoint) is incremented:", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    public static TheoryData<string, string> NotReported => new()
    {
        {
            "locals, a local list and a lambda writing a local of the persistent method",
            """
            [Persistent]
            public class Orders
            {
                public int M(int[] values)
                {
                    var total = 0;
                    var seen = new List<int>();
                    long ticket = 0;
                    foreach (var value in values)
                    {
                        total += value;
                        seen.Add(value);
                    }

                    Array.ForEach(values, v => ticket += v);
                    return total + seen.Count + (int)ticket;
                }
            }
            """
        },
        {
            "request DTOs",
            """
            public sealed class Order
            {
                public string? Name { get; set; }

                public List<string> Tags { get; } = [];
            }

            [Persistent]
            public class Orders
            {
                public Order M(Order body)
                {
                    body.Name = "x";
                    body.Tags.Add("new");
                    return body;
                }
            }
            """
        },
        {
            "fields of the controller (created per request)",
            """
            [Persistent]
            public class Orders
            {
                private int _calls;
                private readonly List<int> _seen = [];

                public int M()
                {
                    _seen.Add(1);
                    return ++_calls;
                }
            }
            """
        },
        {
            "scoped, transient and unregistered services",
            """
            public sealed class Cart
            {
                private readonly List<string> _items = [];
                private int _version;

                public int Add(string item)
                {
                    _items.Add(item);
                    return ++_version;
                }
            }

            public sealed class Basket
            {
                private int _n;

                public int Add() => ++_n;
            }

            public sealed class Tally
            {
                private int _n;

                public int Add() => ++_n;
            }

            public static class Setup
            {
                public static void Register(IServiceCollection services)
                {
                    services.AddScoped<Cart>();
                    services.AddTransient<Basket>();
                }
            }

            [Persistent]
            public class Orders
            {
                public int M(Cart cart, Basket basket) => cart.Add("x") + basket.Add() + new Tally().Add();
            }
            """
        },
        {
            "[SessionState] and [Shared] properties, also changed in place",
            """
            [Persistent]
            public partial class Orders
            {
                [SessionState] public partial int Visits { get; set; }

                [SessionState] public partial List<string>? Cart { get; set; }

                [SessionState] public partial ImmutableList<string>? Lines { get; set; }

                [Shared] public static partial long Total { get; set; }

                public int M()
                {
                    Visits++;
                    Cart ??= [];
                    Cart.Add("x");
                    Lines = (Lines ?? []).Add("y");
                    Total += 1;
                    return Visits;
                }
            }
            """
        },
        {
            "SharedVariable and SharedMap",
            """
            [Persistent]
            public class Orders
            {
                public long M()
                {
                    Plain.Stock.Set("a", 1);
                    Plain.Stock.Update("a", v => v + 1);
                    Plain.Tickets.Write(3);
                    return Plain.Tickets.Update(t => t + 1);
                }
            }
            """
        },
        {
            "reads, locks, immutable collections and async-locals",
            """
            [Persistent]
            public class Orders
            {
                public int M()
                {
                    lock (Plain.Gate)
                    {
                        var names = Plain.Names.Add("x");
                        Plain.Ambient.Value = 3;
                        return names.Count + Plain.Items.Count + (int)Plain.Counter + Plain.Map.GetValueOrDefault("k");
                    }
                }
            }
            """
        },
        {
            "static constructor and constructor of a singleton, object initializer of a new object",
            """
            public sealed class Counters
            {
                private static readonly List<int> Known;
                private int _count;

                public int Count;

                static Counters() { Known = []; Known.Add(1); }

                public Counters() { _count = 1; Count = 2; }

                public int Read() => _count + Known.Count;
            }

            public static class Setup
            {
                public static void Register(IServiceCollection services) => services.AddSingleton<Counters>();
            }

            [Persistent]
            public class Orders
            {
                public int M(Counters counters) => counters.Read() + new Counters { Count = 3 }.Count;
            }
            """
        },
        {
            "writes outside persistent code",
            """
            public class Maintenance
            {
                public void Reset()
                {
                    Plain.Counter = 0;
                    Plain.Items.Clear();
                }
            }
            """
        },
        {
            "a persistent method that calls a helper in the same persistent type (reported where it is, once)",
            """
            [Persistent]
            public class Orders
            {
                public int M() => Helper();

                private static int Helper() => 0;
            }
            """
        },
    };

    [Theory]
    [MemberData(nameof(NotReported))]
    public async Task Analyze_RightWaysAndRequestScopedMemory_ReportsNothing(string context, string code)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Usings + code);

        Assert.True(diagnostics.IsEmpty, $"{context}: expected no diagnostics, got:\n" + string.Join("\n", diagnostics));
    }
}
