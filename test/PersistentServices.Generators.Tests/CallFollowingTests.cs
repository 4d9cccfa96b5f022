using PersistentServices.Generators.Tests.TestSupport;

namespace PersistentServices.Generators.Tests;

/// <summary>Uses reached through calls from persistent code into methods of the same compilation, reported at the call.</summary>
public sealed class CallFollowingTests
{
    private const string Usings = """
        using System.Diagnostics.CodeAnalysis;
        using Microsoft.AspNetCore.Builder;
        using Microsoft.AspNetCore.Routing;
        using Microsoft.Extensions.DependencyInjection;

        namespace App;

        """;

    private const string Nondeterministic = " is nondeterministic: a replayed request would see a different value. Use an injected PersistentTimeProvider, IPersistentRandom or IPersistentIdGenerator instead (each logs what it returns).";

    public static TheoryData<string, string, string, string> Reported => new()
    {
        {
            "a method of an injected class",
            """
            public sealed class Clock
            {
                public DateTime Now() => DateTime.UtcNow;
            }
            """,
            "clock.Now()",
            "'DateTime.UtcNow' via Clock.Now()"
        },
        {
            "a property getter",
            """
            public sealed class Clock
            {
                public DateTime Today => DateTime.Today;
            }
            """,
            "clock.Today",
            "'DateTime.Today' via Clock.Today"
        },
        {
            "an interface registered with its implementation",
            """
            public interface IClock
            {
                DateTime Now();
            }

            public sealed class Clock : IClock
            {
                public DateTime Now() => DateTime.UtcNow;
            }

            public static class Setup
            {
                public static void Register(IServiceCollection services) => services.AddScoped<IClock, Clock>();
            }
            """,
            "iclock.Now()",
            "'DateTime.UtcNow' via Clock.Now()"
        },
        {
            "a constructor, through a member initializer",
            """
            public sealed class Clock
            {
                public Guid Id { get; } = Guid.NewGuid();
            }
            """,
            "new Clock()",
            "'Guid.NewGuid()' via new Clock()"
        },
        {
            "an extension method",
            """
            public sealed class Clock;

            public static class ClockExtensions
            {
                public static DateTimeOffset Stamp(this Clock clock) => DateTimeOffset.UtcNow;
            }
            """,
            "clock.Stamp()",
            "'DateTimeOffset.UtcNow' via ClockExtensions.Stamp()"
        },
        {
            "a method group",
            """
            public sealed class Clock;

            public static class Ids
            {
                public static Guid Make(int i) => Guid.NewGuid();
            }
            """,
            "new Func<int, Guid>(Ids.Make)",
            "'Guid.NewGuid()' via Ids.Make()"
        },
        {
            "three calls deep, through a cycle",
            """
            public sealed class Clock
            {
                public long Ticks(int depth) => depth > 0 ? Ticks(depth - 1) : Helpers.A(depth);
            }

            public static class Helpers
            {
                public static long A(int n) => n > 0 ? A(n - 1) : B(n);

                public static long B(int n) => n > 5 ? A(n) : Environment.TickCount64;
            }
            """,
            "clock.Ticks(3)",
            "'Environment.TickCount64' via Clock.Ticks() → Helpers.A() → Helpers.B()"
        },
        {
            "two uses through one call",
            """
            public sealed class Clock
            {
                public string Both() => DateTime.UtcNow.ToString() + Guid.NewGuid();
            }
            """,
            "clock.Both()",
            "'DateTime.UtcNow' via Clock.Both() (and 1 more through this call)"
        },
    };

    [Theory]
    [MemberData(nameof(Reported))]
    public async Task Analyze_NondeterminismReachedThroughCall_ReportsPS0201AtTheCall(string context, string helpers, string call, string messageStart)
    {
        var source = Usings + helpers + $$"""

            public interface IClockService
            {
                DateTime Now();
            }

            [Persistent]
            public class Orders
            {
                public object M(Clock clock, IClock? iclock) => {{call}};
            }
            """;
        if (!helpers.Contains("interface IClock", StringComparison.Ordinal))
        {
            source += "\npublic interface IClock { DateTime Now(); }\n";
        }

        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(source);

        Assert.True(diagnostics.Length == 1, $"{context}: expected one PS0201, got:\n" + string.Join("\n", diagnostics));
        var diagnostic = DiagnosticAssert.Single(diagnostics, "PS0201", call.StartsWith("new Func", StringComparison.Ordinal) ? "Ids.Make" : call);
        Assert.Equal(messageStart + Nondeterministic, diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture));
    }

    [Fact]
    public async Task Analyze_NondeterminismThroughCall_PointsAtTheUseAsAdditionalLocation()
    {
        var source = Usings + """
            public static class Ids
            {
                public static Guid Make() => Guid.NewGuid();
            }

            public static class Endpoints
            {
                public static void Map(IEndpointRouteBuilder app) => app.MapPost("/id", [Persistent] () => Ids.Make());
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", "Ids.Make()");

        var use = Assert.Single(diagnostic.AdditionalLocations);
        Assert.Equal("Guid.NewGuid()", use.SourceTree!.GetText(TestContext.Current.CancellationToken).ToString(use.SourceSpan));
    }

    [Fact]
    public async Task Analyze_UseDeeperThanTheLimit_IsNotReported()
    {
        // Level1 → ... → Level8 is followed (eight methods); Level1 → ... → Level9 is one too deep.
        var levels = string.Join("\n", Enumerable.Range(1, 9).Select(i => i < 9
            ? $"    public static long Level{i}() => Level{i + 1}();"
            : "    public static long Level9() => Environment.TickCount64;"));
        var source = Usings + $$"""
            public static class Deep
            {
            {{levels}}
            }

            [Persistent]
            public class Orders
            {
                public long Reached() => Deep.Level2();

                public long TooDeep() => Deep.Level1();
            }
            """;

        var diagnostic = DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", "Deep.Level2()");

        Assert.Contains("via Deep.Level2() → Deep.Level3() → Deep.Level4() → Deep.Level5() → Deep.Level6() → Deep.Level7() → Deep.Level8() → Deep.Level9()", diagnostic.GetMessage(System.Globalization.CultureInfo.InvariantCulture), StringComparison.Ordinal);
    }

    [Fact]
    public async Task Analyze_CallIntoPersistentCode_ReportsTheUseOnceWhereItIs()
    {
        var source = Usings + """
            [Persistent]
            public class Orders
            {
                public DateTime M() => Stamp();

                private static DateTime Stamp() => DateTime.UtcNow;
            }

            public class Other
            {
                [Persistent] public DateTime N() => new Orders().M();
            }
            """;

        DiagnosticAssert.Single(await TestCompiler.AnalyzeValidProgramAsync(source), "PS0201", "DateTime.UtcNow");
    }

    public static TheoryData<string, string> NotReported => new()
    {
        {
            "helpers that use the injected PersistentTimeProvider and the library's sources",
            """
            public sealed class Clock(PersistentServices.PersistentTimeProvider time, PersistentServices.IPersistentIdGenerator ids)
            {
                public DateTimeOffset Now() => time.GetUtcNow();

                public Guid NewId() => ids.NewGuid();
            }

            [Persistent]
            public class Orders
            {
                public object M(Clock clock) => (clock.Now(), clock.NewId());
            }
            """
        },
        {
            "pure helpers and constants",
            """
            public static class Pricing
            {
                public const int TaxPercent = 20;

                public static int WithTax(int price) => Round(price + (price * TaxPercent / 100));

                private static int Round(int value) => value - (value % 5);
            }

            [Persistent]
            public class Orders
            {
                public int M(int price) => Pricing.WithTax(price);
            }
            """
        },
        {
            "a helper whose use is suppressed there (#pragma)",
            """
            public static class Trace
            {
                public static string Line(string text)
                {
            #pragma warning disable PS0201 // a timestamp for the log only
                    return DateTime.UtcNow.ToString("O") + " " + text;
            #pragma warning restore PS0201
                }
            }

            [Persistent]
            public class Orders
            {
                public int M()
                {
                    _ = Trace.Line("placed");
                    return 1;
                }
            }
            """
        },
        {
            "a helper whose use is suppressed there ([SuppressMessage] on its type)",
            """
            [SuppressMessage("PersistentServices", "PS0201", Justification = "Timestamps for logs only.")]
            public static class Trace
            {
                public static string Line(string text) => DateTime.UtcNow.ToString("O") + " " + text;
            }

            [Persistent]
            public class Orders
            {
                public int M()
                {
                    _ = Trace.Line("placed");
                    return 1;
                }
            }
            """
        },
        {
            "a call suppressed at the call site",
            """
            public static class Trace
            {
                public static string Line(string text) => DateTime.UtcNow.ToString("O") + " " + text;
            }

            [Persistent]
            public class Orders
            {
                public int M()
                {
            #pragma warning disable PS0201 // log line only
                    _ = Trace.Line("placed");
            #pragma warning restore PS0201
                    return 1;
                }
            }
            """
        },
        {
            "a helper called only from plain code",
            """
            public static class Ids
            {
                public static Guid Make() => Guid.NewGuid();
            }

            public class Orders
            {
                public Guid M() => Ids.Make();
            }
            """
        },
        {
            "an interface without a registered implementation in this compilation",
            """
            public interface IClock
            {
                DateTime Now();
            }

            public sealed class Clock : IClock
            {
                public DateTime Now() => DateTime.UtcNow;
            }

            [Persistent]
            public class Orders
            {
                public DateTime M(IClock clock) => clock.Now();
            }
            """
        },
    };

    [Theory]
    [MemberData(nameof(NotReported))]
    public async Task Analyze_CallsThatReachNothingOrAreSuppressed_ReportNothing(string context, string code)
    {
        var diagnostics = await TestCompiler.AnalyzeValidProgramAsync(Usings + code);

        Assert.True(diagnostics.IsEmpty, $"{context}: expected no diagnostics, got:\n" + string.Join("\n", diagnostics));
    }
}
