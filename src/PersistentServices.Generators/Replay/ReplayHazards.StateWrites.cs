using System;
using System.Collections.Generic;
using System.Threading;
using Microsoft.CodeAnalysis;
using Microsoft.CodeAnalysis.Operations;

namespace PersistentServices.Generators.Replay;

/// <summary>PS0102: persistent code writes memory that outlives the request and is not logged (a static, a singleton's field).</summary>
internal static partial class ReplayHazards
{
    private static void AddStateWrites(IOperation operation, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        switch (operation)
        {
            case ISimpleAssignmentOperation assignment:
                AddWrite(assignment.Target, "assigned", assignment, analysis, scope, findings, cancellationToken);
                break;
            case ICompoundAssignmentOperation compound:
                AddWrite(compound.Target, "changed by '" + OperatorText(compound.OperatorKind) + "='", compound, analysis, scope, findings, cancellationToken);
                break;
            case ICoalesceAssignmentOperation coalesce:
                AddWrite(coalesce.Target, "assigned by '??='", coalesce, analysis, scope, findings, cancellationToken);
                break;
            case IIncrementOrDecrementOperation increment:
                AddWrite(increment.Target, increment.Kind == OperationKind.Increment ? "incremented" : "decremented", increment, analysis, scope, findings, cancellationToken);
                break;
            case IDeconstructionAssignmentOperation deconstruction:
                AddTupleWrites(deconstruction.Target, deconstruction, analysis, scope, findings, cancellationToken);
                break;
            case IArgumentOperation { Parameter.RefKind: RefKind.Ref or RefKind.Out } argument
                when argument.Parent is IInvocationOperation or IObjectCreationOperation:
                var callee = argument.Parent is IInvocationOperation call ? call.TargetMethod : ((IObjectCreationOperation)argument.Parent).Constructor;
                var how = "passed by " + (argument.Parameter.RefKind == RefKind.Out ? "out" : "ref") + " to " + (callee is null ? "a method" : Operations.Display(callee.ReducedFrom ?? callee));
                AddWrite(argument.Value, how, argument, analysis, scope, findings, cancellationToken);
                break;
            case IInvocationOperation invocation when IsCollectionMutator(invocation.TargetMethod):
                var receiver = Operations.GetReceiver(invocation);
                if (receiver is not null && FindPlace(receiver, asReceiver: true, analysis, scope, cancellationToken) is { } place)
                {
                    var method = invocation.TargetMethod.ReducedFrom ?? invocation.TargetMethod;
                    var verb = "changed by " + Operations.DisplayType(method.IsExtensionMethod ? method.Parameters[0].Type : method.ContainingType) + "." + method.Name + "()";
                    findings.Add(ReplayFinding.StateWrite(place.Place, place.Member is null ? verb : "changed (" + place.Member + " " + verb + ")", invocation.Syntax.GetLocation()));
                }

                break;
        }
    }

    private static void AddTupleWrites(IOperation target, IOperation write, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        if (target is ITupleOperation tuple)
        {
            foreach (var element in tuple.Elements)
            {
                AddTupleWrites(element, write, analysis, scope, findings, cancellationToken);
            }
        }
        else
        {
            AddWrite(target, "assigned", write, analysis, scope, findings, cancellationToken);
        }
    }

    private static void AddWrite(IOperation target, string verb, IOperation write, ReplayAnalysis analysis, WriteScope scope, List<ReplayFinding> findings, CancellationToken cancellationToken)
    {
        if (FindPlace(target, asReceiver: false, analysis, scope, cancellationToken) is { } place)
        {
            findings.Add(ReplayFinding.StateWrite(place.Place, place.Member is null ? verb : "changed (" + place.Member + " " + verb + ")", write.Syntax.GetLocation()));
        }
    }

    /// <summary>
    /// The memory that a write to <paramref name="target"/> changes, when it outlives the request (or is a field of
    /// <c>this</c>, which the caller decides about); null for locals, parameters, new objects, [SessionState] and
    /// [Shared] members, shared variables and anything not tracked. <see cref="PlaceResult.Member"/> is null when the
    /// place itself is written, or names the part written ("'X'", "an element") when an object held there is changed.
    /// <c>asReceiver</c> is true when the target holds an object that is changed (a receiver), false when it is assigned.
    /// </summary>
    private static PlaceResult? FindPlace(IOperation? target, bool asReceiver, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        switch (Operations.SkipConversions(target))
        {
            case IFieldReferenceOperation reference:
                return FieldPlace(reference, analysis, scope, cancellationToken);
            case IPropertyReferenceOperation reference:
                return PropertyPlace(reference, asReceiver, analysis, scope, cancellationToken);
            case IArrayElementReferenceOperation element:
                return Through(FindPlace(element.ArrayReference, asReceiver: true, analysis, scope, cancellationToken), "an element");
            case ILocalReferenceOperation local when scope.IsCapturedFromOutside(local.Local):
                return new PlaceResult(new StatePlace(StatePlaceKind.Captured, local.Local.Name, local.Local.Name, "a local variable captured by the endpoint"), null);
            case IParameterReferenceOperation parameter when scope.IsCapturedFromOutside(parameter.Parameter):
                return new PlaceResult(new StatePlace(StatePlaceKind.Captured, parameter.Parameter.Name, parameter.Parameter.Name, "a parameter captured by the endpoint"), null);
            default:
                return null;
        }
    }

    private static PlaceResult? FieldPlace(IFieldReferenceOperation reference, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        var field = reference.Field;
        var name = field.AssociatedSymbol?.Name ?? field.Name;
        if (field.IsConst || IsUntrackedStorage(field.Type) || name.StartsWith("__PersistentServices_", StringComparison.Ordinal))
        {
            return null;
        }

        var type = field.ContainingType;
        var text = type.Name + "." + name;
        if (field.IsStatic)
        {
            return scope.IsStaticConstructorOf(type) ? null : new PlaceResult(new StatePlace(StatePlaceKind.Static, text, name, "a static field"), null);
        }

        return InstanceMemberPlace(reference.Instance, type, text, name, "field", analysis, scope, cancellationToken);
    }

    private static PlaceResult? PropertyPlace(IPropertyReferenceOperation reference, bool asReceiver, ReplayAnalysis analysis, WriteScope scope, CancellationToken cancellationToken)
    {
        var property = reference.Property;
        if (PersistentCode.IsStateProperty(property) || IsUntrackedStorage(property.Type))
        {
            return null;
        }

        if (property.IsIndexer)
        {
            return Through(FindPlace(reference.Instance, asReceiver: true, analysis, scope, cancellationToken), "an element");
        }

        // A property with accessor bodies in this compilation is not memory itself: its setter is followed as a call.
        var storage = asReceiver || !HasAccessorBodies(property, analysis);
        var type = property.ContainingType;
        var text = type.Name + "." + property.Name;
        if (property.IsStatic)
        {
            return storage ? new PlaceResult(new StatePlace(StatePlaceKind.Static, text, property.Name, "a static property"), null) : null;
        }

        if (!analysis.Source.IsInSource(property))
        {
            // A property of a library type: the object that holds it is changed.
            return Through(FindPlace(reference.Instance, asReceiver: true, analysis, scope, cancellationToken), "'" + property.Name + "'");
        }

        return storage ? InstanceMemberPlace(reference.Instance, type, text, property.Name, "property", analysis, scope, cancellationToken) : null;
    }

    private static PlaceResult? InstanceMemberPlace(
        IOperation? instance,
        INamedTypeSymbol type,
        string text,
        string name,
        string memberKind,
        ReplayAnalysis analysis,
        WriteScope scope,
        CancellationToken cancellationToken)
    {
        var receiver = Operations.SkipConversions(instance);
        if (receiver is IObjectCreationOperation or IInstanceReferenceOperation { ReferenceKind: InstanceReferenceKind.ImplicitReceiver })
        {
            // An object being created (object initializer, new X().Y = ...): it is not the singleton.
            return null;
        }

        if (Operations.IsThis(receiver) && scope.IsInstanceConstructorOf(type))
        {
            return null;
        }

        if (analysis.GetRegistry(cancellationToken).IsSingleton(type))
        {
            return new PlaceResult(new StatePlace(StatePlaceKind.Singleton, text, name, "a " + memberKind + " of the singleton '" + type.Name + "'"), null);
        }

        if (Operations.IsThis(receiver))
        {
            return new PlaceResult(new StatePlace(StatePlaceKind.This, text, name, "a " + memberKind), null);
        }

        return Through(FindPlace(receiver, asReceiver: true, analysis, scope, cancellationToken), "'" + name + "'");
    }

    private static PlaceResult? Through(PlaceResult? holder, string member)
        => holder is null ? null : new PlaceResult(holder.Place, holder.Member is null ? member : holder.Member);

    /// <summary>Handles that are not memory of their own: shared variables and maps, session state keys, async-locals.</summary>
    private static bool IsUntrackedStorage(ITypeSymbol type)
        => (type is INamedTypeSymbol named
            && ((KnownSymbols.IsNamespace(named.ContainingNamespace, "PersistentServices") && named.MetadataName is "SharedVariable`1" or "SharedMap`2")
                || (KnownSymbols.IsNamespace(named.ContainingNamespace, "PersistentServices") && named.MetadataName == "SessionStateKey`1")
                || KnownSymbols.Is(named, "System.Threading", "AsyncLocal`1")));

    private static bool HasAccessorBodies(IPropertySymbol property, ReplayAnalysis analysis)
    {
        if (!analysis.Source.IsInSource(property))
        {
            return false;
        }

        foreach (var accessor in new[] { property.GetMethod, property.SetMethod })
        {
            if (accessor is not null && ReplayAnalysis.HasBody(accessor))
            {
                return true;
            }
        }

        return false;
    }

    private static bool IsCollectionMutator(IMethodSymbol method)
    {
        method = method.ReducedFrom ?? method;
        if (!CollectionMutators.Contains(method.Name) || method.ContainingType is not { } type)
        {
            return false;
        }

        var ns = type.ContainingNamespace;
        if (KnownSymbols.IsNamespace(ns, "System.Collections.Immutable"))
        {
            // Immutable collections return a new collection; only their builders change in place.
            return type.Name == "Builder" && type.ContainingType is not null;
        }

        return KnownSymbols.IsNamespace(ns, "System.Collections")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Generic")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Concurrent")
               || KnownSymbols.IsNamespace(ns, "System.Collections.ObjectModel")
               || KnownSymbols.IsNamespace(ns, "System.Collections.Specialized");
    }

    private static string OperatorText(BinaryOperatorKind kind) => kind switch
    {
        BinaryOperatorKind.Add => "+",
        BinaryOperatorKind.Subtract => "-",
        BinaryOperatorKind.Multiply => "*",
        BinaryOperatorKind.Divide => "/",
        BinaryOperatorKind.Remainder => "%",
        BinaryOperatorKind.And => "&",
        BinaryOperatorKind.Or => "|",
        BinaryOperatorKind.ExclusiveOr => "^",
        BinaryOperatorKind.LeftShift => "<<",
        BinaryOperatorKind.RightShift => ">>",
        BinaryOperatorKind.UnsignedRightShift => ">>>",
        _ => kind.ToString(),
    };
}
