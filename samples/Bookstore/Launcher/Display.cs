using System.Globalization;
using Spectre.Console;

namespace Bookstore.Launcher;

/// <summary>
/// Shows a run while it goes: a live screen in a terminal (Spectre.Console: the services, the buyer's last loop step by
/// step, recent events), or plain lines when the output is redirected or <c>--plain</c> is given (events as they
/// happen, a progress line every few seconds).
/// </summary>
internal static class Display
{
    public static async Task ShowWhileAsync(Task work, RunStatus status, Func<Deployment?> deployment, bool plain)
    {
        if (plain || Console.IsOutputRedirected || !AnsiConsole.Profile.Capabilities.Interactive)
        {
            await PlainAsync(work, status);
            return;
        }

        await AnsiConsole.Live(Render(status, deployment()))
            .AutoClear(false)
            .Overflow(VerticalOverflow.Ellipsis)
            .StartAsync(async context =>
            {
                while (!work.IsCompleted)
                {
                    context.UpdateTarget(Render(status, deployment()));
                    await Task.WhenAny(work, Task.Delay(250));
                }

                context.UpdateTarget(Render(status, deployment()));
            });
    }

    private static async Task PlainAsync(Task work, RunStatus status)
    {
        void Print(TimeSpan at, string text) => Console.WriteLine($"[{at.TotalSeconds,7:0.0} s] {text}");
        status.EventAdded += Print;
        try
        {
            var lastLoops = -1;
            while (!work.IsCompleted)
            {
                await Task.WhenAny(work, Task.Delay(TimeSpan.FromSeconds(5)));
                if (!work.IsCompleted && status.Loops != lastLoops && status.Loops > 0)
                {
                    lastLoops = status.Loops;
                    Print(status.Clock.Elapsed, Progress(status));
                }
            }
        }
        finally
        {
            status.EventAdded -= Print;
        }
    }

    private static string Progress(RunStatus status)
        => string.Create(CultureInfo.InvariantCulture,
            $"loop {status.Loops}{(status.LoopsPlanned is { } n ? "/" + n : "")}: {status.Loops / Math.Max(status.Clock.Elapsed.TotalSeconds, 0.001):0.0} loops/s, {status.Retries} resends, {status.Kills} kills");

    private static Rows Render(RunStatus status, Deployment? deployment)
    {
        // Fits 80 columns: the kind and the host are in the start-up events ("store-1 (persistent) on 127.0.0.1:port").
        var services = new Table().Border(TableBorder.Rounded).Expand()
            .AddColumns("service", "port", "pid", "state", "restarts", "forces", "commits");
        foreach (var service in deployment?.Services ?? [])
        {
            var state = service.State switch
            {
                // A node of a replication group: the role its status shows (a fenced old primary waits for its restart).
                ComponentState.Ready when service.IsNode => service.Observed switch
                {
                    { Role: "Primary" } => "[green]primary[/]",
                    { Fenced: true } => "[red]fenced[/]",
                    { Role: "Replica" } => "[blue]replica[/]",
                    { Role: "Witness" } => "[grey]witness[/]",
                    _ => "[yellow]joining[/]",
                },
                ComponentState.Ready => "[green]ready[/]",
                ComponentState.Starting => "[yellow]recovering[/]",
                ComponentState.Down => "[red]down[/]",
                _ => "[grey]stopped[/]",
            };
            var forces = status.Forces.GetValueOrDefault(service.Name);
            services.AddRow(
                Markup.Escape(service.Name),
                service.Url.Port.ToString(CultureInfo.InvariantCulture),
                service.ProcessId.ToString(CultureInfo.InvariantCulture),
                state,
                service.Restarts.ToString(CultureInfo.InvariantCulture),
                forces?.TotalForces.ToString(CultureInfo.InvariantCulture) ?? "",
                forces?.Commits.ToString(CultureInfo.InvariantCulture) ?? "");
        }

        var (steps, events) = status.Snapshot();
        var buyer = new Table().Border(TableBorder.Rounded).Expand().AddColumns("loop", "operation", "what the buyer was told", "ms");
        foreach (var step in steps)
        {
            buyer.AddRow(
                step.Loop.ToString(CultureInfo.InvariantCulture),
                step.Operation,
                Markup.Escape(step.Text),
                step.Elapsed.TotalMilliseconds.ToString("0.0", CultureInfo.InvariantCulture));
        }

        var recent = events.Count == 0
            ? new Markup("[grey](none yet)[/]")
            : new Markup(string.Join('\n', events.Select(e => $"[grey]{e.At.TotalSeconds,7:0.0} s[/] {Markup.Escape(e.Text)}")));

        return new Rows(
            new Markup($"[bold]Online bookstore[/] [grey](Phoenix/App §5.5)[/]  {Markup.Escape(status.Title)}"),
            new Markup($"[grey]Ctrl+C stops after this loop (twice: at once); logs in[/]"),
            new Markup($"[grey]{Markup.Escape(status.RunDirectory)}[/]"),
            services,
            new Markup($"[bold]BookBuyer[/]  {Markup.Escape(status.Phase)} · {status.Clock.Elapsed.TotalSeconds:0} s"),
            new Markup(Markup.Escape(Progress(status))),
            buyer,
            new Panel(recent).Header("events").Border(BoxBorder.Rounded).Expand());
    }
}
