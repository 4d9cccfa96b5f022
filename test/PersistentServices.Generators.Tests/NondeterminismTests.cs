using Microsoft.CodeAnalysis;
using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>PS0201: nondeterministic APIs in persistent code.</summary>
public sealed class NondeterminismTests
{
    private const string Usings = """
        using System.Diagnostics;
        using System.Security.Cryptography;
        using Microsoft.AspNetCore.Builder;
        using Microsoft.AspNetCore.Routing;

        namespace App;

        """;

    [Theory]
    [InlineData("DateTime.Now", "DateTime.Now")]
    [InlineData("DateTime.UtcNow", "DateTime.UtcNow")]
    [InlineData("DateTime.Today", "DateTime.Today")]
    [InlineData("DateTimeOffset.Now", "DateTimeOffset.Now")]
    [InlineData("DateTimeOffset.UtcNow", "DateTimeOffset.UtcNow")]
    [InlineData("Guid.NewGuid()", "Guid.NewGuid()")]
    [InlineData("Guid.CreateVersion7()", "Guid.CreateVersion7()")]
    [InlineData("new Random()", "new Random()")]
    [InlineData("new Random(42)", "new Random()")]
    [InlineData("Random.Shared", "Random.Shared")]
    [InlineData("rng.Next()", "Random.Next()")]
    [InlineData("RandomNumberGenerator.GetInt32(10)", "RandomNumberGenerator.GetInt32()")]
    [InlineData("RandomNumberGenerator.Create()", "RandomNumberGenerator.Create()")]
    [InlineData("Stopwatch.StartNew()", "Stopwatch.StartNew()")]
    [InlineData("new Stopwatch()", "new Stopwatch()")]
    [InlineData("Stopwatch.GetTimestamp()", "Stopwatch.GetTimestamp()")]
    [InlineData("Stopwatch.Frequency", "Stopwatch.Frequency")]
    [InlineData("watch.Elapsed", "Stopwatch.Elapsed")]
    [InlineData("Environment.TickCount", "Environment.TickCount")]
    [InlineData("Environment.TickCount64", "Environment.TickCount64")]
    public async Task Analyze_NondeterministicApiInPersistentController_ReportsPS0201(string expression, string api)
    {
        var source = Usings + $$"""
            [Persistent]
            public class OrdersController
            {
                public object Create(Random rng, Stopwatch watch) => {{expression}};
            }
            """;

        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(source);

        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0201", expression);
        Assert.Equal(DiagnosticSeverity.Warning, diagnostic.Severity);
        Assert.Equal(
            $"'{api}' is nondeterministic: a replayed request would see a different value. Use an injected PersistentTimeProvider, IPersistentRandom or IPersistentIdGenerator instead (each logs what it returns).",
            diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture));
    }

    [Theory]
    [InlineData("time.GetUtcNow()", "time.GetUtcNow()")]
    [InlineData("time.GetLocalNow()", "time.GetLocalNow()")]
    [InlineData("time.GetTimestamp()", "time.GetTimestamp()")]
    [InlineData("TimeProvider.System.GetUtcNow()", "TimeProvider.System")]
    public async Task Analyze_ClockReadingOnAPlainTimeProvider_ReportsPS0201(string expression, string spanText)
    {
        // The TimeProvider in the container is TimeProvider.System unless the application registered another: not logged.
        var source = Usings + $$"""
            [Persistent]
            public class OrdersController
            {
                public object Create(TimeProvider time) => {{expression}};
            }
            """;

        DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", spanText);
    }

    [Theory]
    [InlineData("time.GetUtcNow()")]
    [InlineData("time.GetLocalNow()")]
    [InlineData("time.GetTimestamp()")]
    public async Task Analyze_ClockReadingOnPersistentTimeProvider_ReportsNothing(string expression)
    {
        var source = Usings + $$"""
            [Persistent]
            public class OrdersController
            {
                public object Create(PersistentServices.PersistentTimeProvider time) => {{expression}};
            }
            """;

        DiagnosticAssert.None(await TestCompiler.AnalyzeValidProgramAsync(source));
    }

    [Fact]
    public async Task Analyze_MethodGroupOfNondeterministicApi_ReportsPS0201()
    {
        var source = Usings + """
            [Persistent]
            public class OrdersController
            {
                public Func<Guid> IdFactory() => Guid.NewGuid;
            }
            """;

        DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", "Guid.NewGuid");
    }

    [Theory]
    [InlineData("Random.Shared.Next()", "Random.Shared")]
    [InlineData("new Random().Next(10)", "new Random()")]
    [InlineData("Stopwatch.StartNew().Elapsed", "Stopwatch.StartNew()")]
    [InlineData("DateTime.UtcNow.Ticks", "DateTime.UtcNow")]
    public async Task Analyze_ChainedUseOfOneNondeterministicValue_ReportsOnce(string expression, string spanText)
    {
        var source = Usings + $$"""
            [Persistent]
            public class OrdersController
            {
                public object Create() => {{expression}};
            }
            """;

        DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", spanText);
    }

    public static TheoryData<string, string> PersistentContexts => new()
    {
        {
            "persistent method in a plain class",
            """
            public class Orders
            {
                [Persistent] public DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "property getter of a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                public DateTime Stamp => DateTime.UtcNow;
            }
            """
        },
        {
            "constructor of a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                private readonly DateTime _created;

                public Orders() { _created = DateTime.UtcNow; }

                public DateTime Created => _created;
            }
            """
        },
        {
            "field initializer of a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                private readonly DateTime _created = DateTime.UtcNow;

                public DateTime Created => _created;
            }
            """
        },
        {
            "lambda in a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                public Func<DateTime> Clock() => () => DateTime.UtcNow;
            }
            """
        },
        {
            "local function in a persistent method",
            """
            public class Orders
            {
                [Persistent]
                public DateTime Create()
                {
                    return Now();

                    static DateTime Now() => DateTime.UtcNow;
                }
            }
            """
        },
        {
            "persistent local function in a plain method",
            """
            public class Orders
            {
                public DateTime Create()
                {
                    return Now();

                    [Persistent] static DateTime Now() => DateTime.UtcNow;
                }
            }
            """
        },
        {
            "controller inheriting [Persistent]",
            """
            [Persistent]
            public abstract class PersistentControllerBase
            {
            }

            public class Orders : PersistentControllerBase
            {
                public DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "override of a [Persistent] method",
            """
            public class Base
            {
                [Persistent] public virtual DateTime Create() => default;
            }

            public class Orders : Base
            {
                public override DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "class with a [SessionState] property",
            """
            public partial class Orders
            {
                [SessionState] public partial int Count { get; set; }

                public DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "class with a [Shared] property",
            """
            [SharedState]
            public partial class Orders
            {
                [Shared] public partial int Count { get; set; }

                public DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "[SharedState] class",
            """
            [SharedState]
            public class Orders
            {
                public DateTime Create() => DateTime.UtcNow;
            }
            """
        },
        {
            "[PersistentReadOnly] method of a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                [PersistentReadOnly] public DateTime Peek() => DateTime.UtcNow;
            }
            """
        },
        {
            "minimal API lambda with [Persistent]",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", [Persistent] () => DateTime.UtcNow);
                }
            }
            """
        },
        {
            "minimal API lambda with WithMetadata(new PersistentAttribute())",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", () => DateTime.UtcNow).WithName("orders").WithMetadata(new PersistentAttribute());
                }
            }
            """
        },
        {
            "minimal API lambda in a group with WithMetadata(new PersistentAttribute())",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapGroup("/orders").WithMetadata(new PersistentAttribute()).MapPost("/", () => DateTime.UtcNow);
                }
            }
            """
        },
        {
            "minimal API lambda with the endpoint convention .Persistent()",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", () => DateTime.UtcNow).WithName("orders").Persistent();
                }
            }
            """
        },
        {
            "minimal API lambda in a group with the endpoint convention .Persistent()",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapGroup("/orders").Persistent().MapPost("/", () => DateTime.UtcNow);
                }
            }
            """
        },
        {
            "lambda nested in a [Persistent] minimal API lambda",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", [Persistent] () => new[] { 1, 2 }.Select(i => DateTime.UtcNow.AddDays(i)).ToList());
                }
            }
            """
        },
    };

    [Theory]
    [MemberData(nameof(PersistentContexts))]
    public async Task Analyze_NondeterministicApiInPersistentContext_ReportsPS0201(string context, string code)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Usings + code);

        Assert.True(diagnostics.Length == 1, $"{context}: expected one PS0201, got:\n" + string.Join("\n", diagnostics));
        DiagnosticAssert.Single(diagnostics, "PS0201", "DateTime.UtcNow");
    }

    public static TheoryData<string, string> NonPersistentContexts => new()
    {
        {
            "plain class",
            """
            public class Orders
            {
                public object[] Create(Random rng) =>
                [
                    DateTime.Now, DateTime.UtcNow, DateTime.Today, DateTimeOffset.Now, DateTimeOffset.UtcNow,
                    Guid.NewGuid(), Guid.CreateVersion7(), new Random(), Random.Shared, rng.Next(),
                    RandomNumberGenerator.GetInt32(10), Stopwatch.StartNew(), Stopwatch.GetTimestamp(),
                    Environment.TickCount, Environment.TickCount64,
                ];
            }
            """
        },
        {
            "minimal API lambda without persistent metadata",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", () => DateTime.UtcNow).WithName("orders");
                }
            }
            """
        },
        {
            "other metadata in WithMetadata",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", () => DateTime.UtcNow).WithMetadata(new PersistentReadOnlyAttribute());
                }
            }
            """
        },
        {
            "the endpoint convention .PersistentReadOnly()",
            """
            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app)
                {
                    app.MapPost("/orders", () => DateTime.UtcNow).PersistentReadOnly();
                }
            }
            """
        },
        {
            "nested class of a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                public class Helper
                {
                    public DateTime Now() => DateTime.UtcNow;
                }
            }
            """
        },
        {
            "PersistentTimeProvider in a persistent controller",
            """
            [Persistent]
            public class Orders(PersistentServices.PersistentTimeProvider time)
            {
                public DateTimeOffset Create() => time.GetUtcNow();

                public long Ticks() => time.GetTimestamp();
            }
            """
        },
        {
            "deterministic DateTime, Guid and Environment members in a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                public object[] Create() =>
                [
                    new DateTime(2024, 1, 1), DateTime.MinValue, DateTime.Parse("2024-01-01", System.Globalization.CultureInfo.InvariantCulture),
                    DateTime.UnixEpoch.AddDays(1), DateTimeOffset.MaxValue, Guid.Empty, Guid.Parse("b8b2b2a0-0000-0000-0000-000000000000"),
                    Environment.NewLine, Environment.ProcessorCount, TimeSpan.FromSeconds(1),
                ];
            }
            """
        },
        {
            "nameof in a persistent controller",
            """
            [Persistent]
            public class Orders
            {
                public string Name() => nameof(DateTime.UtcNow) + nameof(Random.Shared);
            }
            """
        },
    };

    [Theory]
    [MemberData(nameof(NonPersistentContexts))]
    public async Task Analyze_NondeterministicApiOutsidePersistentCode_ReportsNothing(string context, string code)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Usings + code);

        Assert.True(diagnostics.IsEmpty, $"{context}: expected no diagnostics, got:\n" + string.Join("\n", diagnostics));
    }
}
