using System.Collections.Concurrent;
using System.Globalization;
using PersistentServices.Diagnostics;
using Spectre.Console;
using Spectre.Console.Rendering;

namespace PersistentServices.Tool;

/// <summary>
/// Shows how far a command's long steps have come (psctl verify's walks over the log, replay-check's copy and the
/// service's run) while they run. Never on standard output: what a script reads there is the same with or without it.
/// </summary>
internal interface IProgressDisplay
{
    /// <summary>Runs <paramref name="work"/> and returns what it returns (or throws what it throws), showing <paramref name="steps"/> while it runs.</summary>
    T Run<T>(IReadOnlyList<WorkProgress> steps, Func<T> work);
}

/// <summary>No display: the work runs on the caller's thread (output redirected, a test, <c>--verbose</c>).</summary>
internal sealed class NoProgressDisplay : IProgressDisplay
{
    public static readonly NoProgressDisplay Instance = new();

    private NoProgressDisplay()
    {
    }

    public T Run<T>(IReadOnlyList<WorkProgress> steps, Func<T> work) => work();
}

/// <summary>
/// A Spectre.Console progress display on an interactive console (standard error, a terminal): nothing for work that
/// ends within <paramref name="delay"/> (one second for psctl), then a bar per step (percentage, bytes, time left; a
/// step whose size is unknown spins, with the time since the work started), refreshed every 100 ms until the work ends
/// and then cleared, so that the terminal keeps only the command's report.
/// </summary>
internal sealed class ConsoleProgressDisplay(IAnsiConsole console, TimeSpan delay) : IProgressDisplay
{
    /// <summary>A task's state: its step's size is known (bytes), so its amount and time left mean something.</summary>
    private const string Sized = "psctl.sized";

    private static readonly TimeSpan Refresh = TimeSpan.FromMilliseconds(100);

    /// <summary>The display psctl uses: on standard error when it is an interactive terminal, none otherwise.</summary>
    public static IProgressDisplay ForStandardError() =>
        For(Console.IsErrorRedirected, AnsiConsole.Create(new AnsiConsoleSettings { Out = new AnsiConsoleOutput(Console.Error) }));

    /// <summary>A display on <paramref name="console"/>, or none when its output is redirected or it is not interactive.</summary>
    public static IProgressDisplay For(bool redirected, IAnsiConsole console) =>
        redirected || !console.Profile.Capabilities.Interactive || !console.Profile.Capabilities.Ansi
            ? NoProgressDisplay.Instance
            : new ConsoleProgressDisplay(console, TimeSpan.FromSeconds(1));

    public T Run<T>(IReadOnlyList<WorkProgress> steps, Func<T> work)
    {
        var started = TimeProvider.System.GetTimestamp();
        var running = Task.Factory.StartNew(work, CancellationToken.None, TaskCreationOptions.LongRunning, TaskScheduler.Default);
        var done = ((IAsyncResult)running).AsyncWaitHandle;
        if (!done.WaitOne(delay))
        {
            // Ctrl+C ends psctl (replay-check stops its service first): the terminal gets its cursor back, which the display hid.
            ConsoleCancelEventHandler restore = (_, _) => console.Cursor.Show(true);
            Console.CancelKeyPress += restore;
            try
            {
                Show(steps, done, started);
            }
            finally
            {
                Console.CancelKeyPress -= restore;
            }
        }

        return running.GetAwaiter().GetResult();
    }

    private void Show(IReadOnlyList<WorkProgress> steps, WaitHandle done, long started)
    {
        var units = new ConcurrentDictionary<int, string?>(); // what each task counts, when not bytes; read by the render thread
        console.Progress()
            .AutoClear(true)
            .Columns(new TaskDescriptionColumn(), new ProgressBarColumn(), new AmountColumn(units), new TimeColumn(started), new SpinnerColumn())
            .Start(context =>
            {
                var shown = steps.Select(step =>
                {
                    var task = context.AddTask(Markup.Escape(step.Description), autoStart: false);
                    units[task.Id] = step.Unit;
                    return (Step: step, Task: task);
                }).ToList();
                do
                {
                    UpdateAll(shown);
                    context.Refresh();
                }
                while (!done.WaitOne(Refresh));

                UpdateAll(shown);
            });
    }

    /// <summary>The steps run one after the other: the first one not finished is running (its elapsed time counts).</summary>
    private static void UpdateAll(List<(WorkProgress Step, ProgressTask Task)> shown)
    {
        var current = shown.FindIndex(s => !s.Step.Finished);
        for (var i = 0; i < shown.Count; i++)
        {
            Update(shown[i].Step, shown[i].Task, running: i == current);
        }
    }

    private static void Update(WorkProgress step, ProgressTask task, bool running)
    {
        var total = step.Total;
        var doneUnits = step.Done;
        if (!task.IsStarted && (running || doneUnits > 0 || step.Finished))
        {
            task.StartTask();
        }

        task.IsIndeterminate = total <= 0 && !step.Finished;
        if (total > 0)
        {
            task.State.Update<bool>(Sized, _ => true);
            task.MaxValue = total;
            task.Value = Math.Min(doneUnits, total);
        }

        if (step.Finished && !task.IsFinished)
        {
            task.Value = task.MaxValue;
            task.StopTask();
        }
    }

    /// <summary>"37% 332/875 MiB" (or "40% 2,000/5,000 sessions") for a step whose size is known; nothing for the others (not "0%").</summary>
    private sealed class AmountColumn(ConcurrentDictionary<int, string?> units) : ProgressColumn
    {
        protected override bool NoWrap => true;

        public override IRenderable Render(RenderOptions options, ProgressTask task, TimeSpan deltaTime)
        {
            if (!task.State.Get<bool>(Sized))
            {
                return Text.Empty;
            }

            var unit = units.GetValueOrDefault(task.Id);
            return new Text(unit is null
                ? string.Create(CultureInfo.InvariantCulture, $"{task.Percentage,3:0}% {MiB(task.Value)}/{MiB(task.MaxValue)} MiB")
                : string.Create(CultureInfo.InvariantCulture, $"{task.Percentage,3:0}% {task.Value:#,0}/{task.MaxValue:#,0} {unit}"));
        }

        private static string MiB(double bytes) => (bytes / (1 << 20)).ToString("#,0", CultureInfo.InvariantCulture);
    }

    /// <summary>The time left ("~00:00:05") for a running step whose size is known; for the others, the time since the work started.</summary>
    private sealed class TimeColumn(long started) : ProgressColumn
    {
        protected override bool NoWrap => true;

        public override IRenderable Render(RenderOptions options, ProgressTask task, TimeSpan deltaTime)
        {
            if (!task.IsStarted || task.IsFinished)
            {
                return Text.Empty;
            }

            if (!task.State.Get<bool>(Sized))
            {
                return new Text(Clock(TimeProvider.System.GetElapsedTime(started)));
            }

            return new Text(task.RemainingTime is { } left ? "~" + Clock(left) : "");
        }

        private static string Clock(TimeSpan time) => time.ToString(@"hh\:mm\:ss", CultureInfo.InvariantCulture);
    }
}
